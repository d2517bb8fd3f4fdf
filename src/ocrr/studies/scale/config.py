"""What one run of the scale study measures: ``ScaleConfig``, read by the study and by its outputs."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_SCALES = (10_000, 100_000, 1_000_000)
# The largest scale: 100 times the study's largest point (10M), below the 2**31 entries FAISS's
# HNSW graph numbers (32-bit ids); its float32 vectors alone, in memory or in the IVF re-rank's
# scratch file, take N x dim x 4 bytes: 1.5 TB at 1e9 x 384.
MAX_SCALE = 1_000_000_000
APPROXIMATE_BACKENDS = ("hnsw", "hnsw_sq8", "exact_sq8", "ivf", "ivf_sq8", "ivf_pq")  # compared with exact search


@dataclass
class ScaleConfig:
    scales: tuple[int, ...] = DEFAULT_SCALES
    n_classes: int = 100
    dim: int = 384
    sigma: float = 0.3
    n_queries: int = 200
    k: int = 5
    seed: int = 0
    backends: tuple[str, ...] = ("hnsw",)
    exact: str = "auto"  # "auto" | "yes" | "no": keep an in-memory exact index to time it
    exact_max_gb: float = 4.0
    query_modes: tuple[str, ...] = ("fresh", "stored")
    hnsw_m: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    threads: int = 2
    order: str = "class"  # insertion order into the approximate backends: "class" (the stream's) or "shuffled"
    index_params: dict = field(default_factory=dict)  # extra make_index parameters
    family: str = "gaussian"  # "gaussian" | "subspace" (ocrr.studies.scale.data)
    intrinsic_dim: int = 16  # subspace family: dimension of the classes' subspace
    ambient: float = 0.005  # subspace family: isotropic noise per dimension on top
    nlist: int = 0  # IVF lists (0: largest power of two <= 4 sqrt N)
    nprobe: int = 16  # IVF settings used when target_recall is 0
    rerank: int = 100
    target_recall: float = 0.95  # tune nprobe and re-rank depth for this recall@k (0: no tuning)
    train_per_list: int = 32  # k-means training entries per list
    vectors_dir: str | None = None  # scratch folder of the float32 file the IVF re-rank reads (None: temp dir)
    target_agreement: float = 0.0  # tune for the vote agreeing with exact search on the tuning sample (0: off)
    tune_queries: int = 0  # size of the tuning sample (0: n_queries)
    tune_tolerance: float = 0.0  # no point meets the targets: cheapest within this of the best bound
    cold_queries: bool = False  # also time single queries after evicting the vector file from the page cache
    also_time: tuple = ()  # IVF: (nprobe, rerank) settings scored and timed besides the tuned one

    def keep_exact(self, n: int) -> bool:
        if self.exact == "yes":
            return True
        if self.exact == "no":
            return False
        return n * self.dim * 4 <= self.exact_max_gb * 1e9
