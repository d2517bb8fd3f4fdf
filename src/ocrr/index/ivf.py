"""Inverted-file search (FAISS IVF) with an exact re-rank from float32 vectors.

Kinds (similarity = inner product of unit vectors = cosine; FAISS ranks candidates by
L2, which orders unit vectors the same way):

* ``ivf``      IndexIVFFlat: float32 vectors in the inverted lists
* ``ivf_sq8``  IndexIVFScalarQuantizer QT_8bit: 8-bit codes of the residuals
* ``ivf_pq``   IndexIVFPQFastScan: 4-bit product-quantiser codes (``pq_m`` sub-quantisers,
  default dim/2, so 96 B per 384-d vector), scanned with SIMD lookup tables -- the
  combination FAISS's index guidelines suggest for speed at 10M+ vectors, with a re-rank

A query probes the ``nprobe`` lists whose centroids are nearest, takes the ``rerank``
best candidates by their compressed scores, and re-scores those from the float32
vectors (``ocrr.index.rerank``), so the returned similarities are exact dot products
and only membership in the top-k is approximate. The float32 vectors are either
borrowed (``source=`` a callable returning the ledger's buffer, in RAM or memory-mapped;
row i is the vector of id i, so no second copy exists) or owned (a capacity-doubling
copy, for a datastore without a ledger).

Coarse quantiser. Until ``min_train`` vectors have arrived they are searched exactly (a
small staging index); then k-means (spherical, FAISS ``Kmeans``, seeded; in two levels
from 1024 lists, ``ocrr.index.kmeans``) runs on an even spread of at most ``nlist *
train_per_list`` of them and everything moves into FAISS. ``nlist`` 0 (default) picks the
largest power of two <= 4 sqrt(N) at training (FAISS's guideline is 4-16 sqrt(N) lists;
the lower end keeps k-means affordable on two cores: 8192 lists at 10M). From
``grouped_quantizer_from`` lists (default 4096) the centroids are searched through an
inverted file of their own instead of a flat scan: assigning 10M vectors to 8192 flat
centroids is a 64 TFLOP matrix product. The centroids are grouped by k-means into
``round(sqrt(nlist))`` groups; a vector is compared with the group centres, then with the
centroids of its nearest groups (two when adding, enough for twice ``nprobe`` centroids
when searching). On 8192 centroids of 384-d clustered data it finds the exact nearest
centroid for every added vector in half the CPU time of the HNSW graph (M=32, efSearch 16)
used before, which missed some (docs/reference/measurements.md) -- the assignment is most
of an add.

Retraining trigger. The centroids describe the entries seen at training. When the live
entries exceed ``retrain_growth`` (default 4) times the training count, lists are on
average 4x longer than the list count was chosen for (the best count grows as sqrt(N):
it should have doubled) and, in a class-incremental ledger, most entries belong to
classes k-means never saw. ``needs_retrain`` then turns true and a warning is logged
once; the owner's ``rebuild_index`` (the substrate's maintenance step) retrains on the
whole ledger. It is never done inside an ``add``: at 10M it takes minutes.

Tuning. ``tune(target_recall, k)`` (``ocrr.index.ivf_tune``) picks ``nprobe`` and
``rerank`` for a recall target on a held-out sample of the index's own vectors; with
``target_agreement`` (and ``label_of``: ids -> label indices) it picks them for the
substrate's vote to agree with exact search instead (or as well); ``tune_queries`` is the
sample size, ``tune_tolerance`` how far below the best bound a cheaper fallback may be
when no point meets the target. With a target set, tuning runs after training and
whenever the index has grown ``retune_growth`` (default 2) times since the last tuning.

Determinism: the same adds with one FAISS thread give the same lists and results
(k-means is seeded; several threads can change float summation order).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ocrr.index.exact import ExactIndex, rows_and_ids
from ocrr.index.ivf_tune import check_targets, tune_ivf
from ocrr.index.kmeans import ADD_GROUPS, coarse_centroids, groups_to_probe
from ocrr.index.rerank import rerank
from ocrr.index.vote import VoteRule
from ocrr.utils.heap import release_free_heap

KINDS = ("ivf", "ivf_sq8", "ivf_pq")
IVF_DEFAULTS = {
    "nlist": 0,
    "nprobe": 16,
    "rerank": 100,
    "pq_m": 0,
    "min_train": 20_000,
    "train_per_list": 32,
    "grouped_quantizer_from": 4096,
    "retrain_growth": 4.0,
    "retune_growth": 2.0,
    "target_recall": 0.0,
    "tune_k": 5,
    "seed": 0,
    "target_agreement": 0.0,
    "tune_queries": 200,
    "tune_tolerance": 0.0,
}
# Rows per FAISS add: each holds its residuals (4 x dim bytes a row) while it runs. FAISS sorts
# an add's rows by list with a stable sort, so the lists do not depend on the chunking.
ADD_CHUNK = 16_384
log = logging.getLogger("ocrr.index")


def _faiss() -> Any:
    import faiss  # imported lazily: only approximate backends need it

    return faiss


def nlist_for(n: int) -> int:
    """Largest power of two <= 4 sqrt(n), at least 16, and at most n / 32 (k-means needs
    a few dozen points per centroid)."""
    want = max(16, 2 ** int(math.floor(math.log2(max(1.0, 4 * math.sqrt(max(n, 1)))))))
    while want > 16 and want * 32 > n:
        want //= 2
    return want


class IVFIndex:
    """FAISS IVF lists + exact re-rank, behind ExactIndex's interface."""

    supports_start = False
    exact = False

    def __init__(
        self,
        dim: int,
        kind: str = "ivf_pq",
        source: Callable[[], np.ndarray] | None = None,
        nlist: int = 0,
        nprobe: int = 16,
        rerank: int = 100,
        pq_m: int = 0,
        min_train: int = 20_000,
        train_per_list: int = 32,
        grouped_quantizer_from: int = 4096,
        retrain_growth: float = 4.0,
        retune_growth: float = 2.0,
        target_recall: float = 0.0,
        tune_k: int = 5,
        seed: int = 0,
        target_agreement: float = 0.0,
        label_of: Callable[[np.ndarray], np.ndarray] | None = None,
        tune_queries: int = 200,
        tune_tolerance: float = 0.0,
        vote_rule: VoteRule | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"IVFIndex kind must be one of {KINDS}, got {kind!r}")
        for key, value in (("nlist", nlist), ("pq_m", pq_m)):
            if value < 0:
                raise ValueError(f"{key} must be >= 0 (0: chosen automatically), got {value}")
        for key, value in (
            ("nprobe", nprobe),
            ("rerank", rerank),
            ("min_train", min_train),
            ("train_per_list", train_per_list),
            ("grouped_quantizer_from", grouped_quantizer_from),
            ("tune_k", tune_k),
        ):
            if value < 1:
                raise ValueError(f"{key} must be >= 1, got {value}")
        if not 0 <= target_recall <= 1:
            raise ValueError(f"target_recall must be in [0, 1] (0: no tuning), got {target_recall}")
        check_targets(target_recall, target_agreement, tune_tolerance, tune_queries, label_of is not None)
        self.pq_m = int(pq_m) or max(1, dim // 2)
        if kind == "ivf_pq" and dim % self.pq_m:
            raise ValueError(f"pq_m={self.pq_m} must divide the dimension {dim}")
        self.dim, self.kind, self.name = int(dim), kind, kind
        self._source = source
        self.nlist_setting, self.nlist = int(nlist), 0
        self.nprobe, self.rerank = int(nprobe), int(rerank)
        self.min_train, self.train_per_list = int(min_train), int(train_per_list)
        self.grouped_quantizer_from = int(grouped_quantizer_from)
        self.retrain_growth, self.retune_growth = float(retrain_growth), float(retune_growth)
        self.target_recall, self.tune_k, self.seed = float(target_recall), int(tune_k), int(seed)
        self.target_agreement, self.label_of, self.vote_rule = float(target_agreement), label_of, vote_rule
        self.tune_queries, self.tune_tolerance = int(tune_queries), float(tune_tolerance)
        self.epoch = 0
        self.trained_on = 0  # entries the centroids were trained on (0: not trained yet)
        self.tuned_at = 0  # live entries at the last tuning
        self.tuning: dict | None = None  # what the last tune() found (ocrr.index.ivf_tune)
        self._warned_retrain = False
        self._index: Any = None  # the FAISS index once trained (FAISS has no type hints)
        self._params: tuple[Any, int, tuple[Any, Any]] | None = None  # (index, nprobe, its search parameters)
        self._staged: ExactIndex | None = ExactIndex(self.dim)
        # Owned mode: float32 rows by position, and position -> caller id. Borrowed: row = id
        # (and the owned buffer stays empty).
        self._own = np.empty((0, self.dim), np.float32)
        self._row_ids = np.empty(0, np.int64)
        self._alive = np.empty(0, bool)  # by row
        self._rows = 0
        self._live = 0

    # -- storage --------------------------------------------------------------------------
    @property
    def borrowed(self) -> bool:
        return self._source is not None

    def _matrix(self) -> np.ndarray:
        """The float32 rows the re-rank reads (the ledger's buffer, or the owned copy)."""
        return self._source() if self._source is not None else self._own

    def _grow(self, need: int) -> None:
        if need <= len(self._alive):
            return
        cap = max(need, 2 * len(self._alive), 1024)
        alive = np.zeros(cap, bool)
        alive[: len(self._alive)] = self._alive
        self._alive = alive
        if not self.borrowed:
            own = np.empty((cap, self.dim), np.float32)
            own[: self._rows] = self._own[: self._rows]
            ids = np.empty(cap, np.int64)
            ids[: self._rows] = self._row_ids[: self._rows]
            self._own, self._row_ids = own, ids

    def _store(self, vecs: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Record rows for ``ids`` (owned: copy the vectors); returns their FAISS row numbers."""
        if self.borrowed:
            src = self._matrix()
            if (
                ids.min() < 0
                or ids.max() >= len(src)
                or not (np.array_equal(src[ids[0]], vecs[0]) and np.array_equal(src[ids[-1]], vecs[-1]))
            ):
                raise ValueError(
                    "an index borrowing its vectors needs id i to be row i of the source, "
                    "and the rows written there before they are added"
                )
            self._grow(int(ids.max()) + 1)
            if self._alive[ids].any():
                raise ValueError("ids already indexed")
            self._alive[ids] = True
            self._rows = max(self._rows, int(ids.max()) + 1)
            self._live += len(ids)
            return ids
        rows = np.arange(self._rows, self._rows + len(ids), dtype=np.int64)
        self._grow(self._rows + len(ids))
        self._own[rows] = vecs
        self._row_ids[rows] = ids
        self._alive[rows] = True
        self._rows += len(ids)
        self._live += len(ids)
        return rows

    # -- construction -----------------------------------------------------------------------
    @property
    def trained(self) -> bool:
        return self._index is not None

    def _new_ivf(self, centroids: np.ndarray) -> Any:
        faiss = _faiss()
        # L2 on unit vectors ranks exactly as inner product (|q - x|^2 = 2 - 2 q.x), and FAISS's
        # L2 paths are the better ones: measured on 64-d clustered unit vectors, fast-scan PQ
        # found 3.6 % of the true top-5 among its top 5 with METRIC_INNER_PRODUCT, 38 % with L2.
        l2 = faiss.METRIC_L2
        nlist = len(centroids)
        centroids = np.ascontiguousarray(centroids, np.float32)
        if nlist >= self.grouped_quantizer_from:
            groups = faiss.IndexFlatL2(self.dim)
            quantizer = faiss.IndexIVFFlat(groups, self.dim, max(2, int(round(math.sqrt(nlist)))), l2)
            quantizer.own_fields = True
            groups.this.disown()  # the quantiser's inverted file frees its group centres
            quantizer.cp.seed = self.seed + 4321
            quantizer.train(centroids)
            quantizer.nprobe = ADD_GROUPS  # for assigning added vectors; queries pass their own
        else:
            quantizer = faiss.IndexFlatL2(self.dim)
        quantizer.add(centroids)
        if self.kind == "ivf":
            index = faiss.IndexIVFFlat(quantizer, self.dim, nlist, l2)
        elif self.kind == "ivf_sq8":
            index = faiss.IndexIVFScalarQuantizer(quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, l2)
        else:
            index = faiss.IndexIVFPQFastScan(quantizer, self.dim, nlist, self.pq_m, 4, l2)
        index.own_fields = True
        quantizer.this.disown()  # the IVF index frees its quantiser
        return index

    def train(self, sample: np.ndarray, centroids: np.ndarray | None = None) -> None:
        """Train the coarse quantiser (and codes) on ``sample``; ``centroids``: reuse ones
        already computed (the scale study trains k-means once for several IVF kinds)."""
        if self.trained:
            return
        faiss = _faiss()
        sample = np.ascontiguousarray(sample, np.float32).reshape(-1, self.dim)
        if len(sample) == 0:
            raise ValueError("train needs at least one vector")
        n_now = len(self)
        if centroids is None:
            centroids = self.kmeans(sample)
        index = self._new_ivf(centroids)
        if not index.is_trained:  # the codes (sq8 range, PQ codebooks) learn from residuals
            # One OpenMP thread: PQ training is 192 tiny k-means runs whose thread hand-offs
            # dominate on a busy box (docs/scale/ivf.md has the two timings).
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                index.train(sample[:: max(1, len(sample) // 65_536)])
            finally:
                faiss.omp_set_num_threads(threads)
        self._index, self.nlist = index, len(centroids)
        self.trained_on = max(n_now, len(sample))
        staged, self._staged = self._staged, None
        if staged is not None and len(staged):
            self._add_trained(staged.vectors, staged.ids)
        if self.tunes and len(self):
            self.tune(self.target_recall, self.tune_k)

    def kmeans(self, sample: np.ndarray, n: int | None = None) -> np.ndarray:
        """Spherical k-means centroids for ``nlist`` (or the automatic count for ``n`` entries):
        flat, or in two levels from ``TWO_LEVEL_FROM`` lists (``ocrr.index.kmeans``)."""
        nlist = self.nlist_setting or nlist_for(n if n is not None else max(len(self), len(sample)))
        nlist = min(nlist, len(sample))
        take = sample[:: max(1, len(sample) // (nlist * self.train_per_list))]
        return coarse_centroids(take, nlist, self.seed + 1234, self.train_per_list)

    @property
    def takes_assignments(self) -> bool:
        """Whether ``add`` can use list numbers computed elsewhere: not for fast-scan PQ, whose
        lists are packed in blocks by its own add (FAISS's add_core corrupts them)."""
        return self.kind != "ivf_pq"

    def add(self, vecs: np.ndarray, ids: np.ndarray, assign: np.ndarray | None = None) -> None:
        """Add rows; ``assign``: their list numbers, when computed already (``assign()``;
        ignored by kinds that cannot take them, see ``takes_assignments``)."""
        vecs, ids = rows_and_ids(vecs, ids, self.dim)
        if len(ids) == 0:
            return
        if self._staged is not None:  # (not trained yet)
            self._staged.add(vecs, ids)
            if len(self._staged) >= self.min_train:
                self.train(self._staged.vectors)
            return
        self._add_trained(vecs, ids, assign)
        self._after_growth()

    def build(self, vecs: np.ndarray, ids: np.ndarray, train_max: int = 1_000_000) -> None:
        """Bulk load (a rebuild or ``auto``'s switch): train on an even spread of ``vecs`` (at
        most ``train_max`` rows) if not trained yet, add everything, then tune once."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        if not self.trained and len(ids):
            self.train(vecs[:: max(1, len(ids) // train_max)])
        for lo in range(0, len(ids), ADD_CHUNK):
            self._add_trained(np.asarray(vecs[lo : lo + ADD_CHUNK], np.float32), ids[lo : lo + ADD_CHUNK])
        self.trained_on = max(self.trained_on, len(self))
        release_free_heap()  # the adds' buffers, freed between the lists' growing codes
        if self.tunes and len(self):
            self.tune(self.target_recall, self.tune_k)

    def assign(self, vecs: np.ndarray) -> np.ndarray:
        """The list each vector goes to (the coarse quantiser's nearest centroid)."""
        _, lists = self._index.quantizer.search(np.ascontiguousarray(vecs, np.float32), 1)
        return lists.reshape(-1)

    def _add_trained(self, vecs: np.ndarray, ids: np.ndarray, assign: np.ndarray | None = None) -> None:
        faiss = _faiss()
        for lo in range(0, len(ids), ADD_CHUNK):
            v, i = np.ascontiguousarray(vecs[lo : lo + ADD_CHUNK]), ids[lo : lo + ADD_CHUNK]
            rows = np.ascontiguousarray(self._store(v, i))
            if assign is None or not self.takes_assignments:
                self._index.add_with_ids(v, rows)
            else:
                a = np.ascontiguousarray(assign[lo : lo + ADD_CHUNK], np.int64)
                self._index.add_core(len(v), faiss.swig_ptr(v), faiss.swig_ptr(rows), faiss.swig_ptr(a))

    def _after_growth(self) -> None:
        if self.needs_retrain and not self._warned_retrain:
            self._warned_retrain = True
            log.warning(
                "%s index: %d live entries, %.1fx the %d its centroids were trained on; "
                "call rebuild_index() to retrain",
                self.kind,
                len(self),
                len(self) / self.trained_on,
                self.trained_on,
            )
        if self.tunes and self.retune_growth > 0 and len(self) >= self.retune_growth * self.tuned_at:
            self.tune(self.target_recall, self.tune_k)

    @property
    def needs_retrain(self) -> bool:
        """True once the live entries exceed ``retrain_growth`` x the training count."""
        return self.trained and self.retrain_growth > 0 and len(self) > self.retrain_growth * self.trained_on

    @property
    def tunes(self) -> bool:
        """Whether the index tunes itself (a recall or an agreement target is set)."""
        return self.target_recall > 0 or self.target_agreement > 0

    def tune(
        self,
        target_recall: float,
        k: int | None = None,
        n_queries: int | None = None,
        seed: int | None = None,
        sample: tuple | None = None,
        target_agreement: float | None = None,
        tolerance: float | None = None,
    ) -> dict:
        """Set ``nprobe`` and ``rerank`` for recall@k >= ``target_recall`` and/or vote agreement
        >= ``target_agreement`` (default: the index's; see ocrr.index.ivf_tune; ``sample``:
        (ids, vectors, exact top-(k+1) ids) computed elsewhere)."""
        agreement = self.target_agreement if target_agreement is None else target_agreement
        self.tuning = tune_ivf(
            self,
            target_recall,
            k or self.tune_k,
            n_queries or self.tune_queries,
            self.seed if seed is None else seed,
            sample=sample,
            target_agreement=agreement,
            label_of=self.label_of,
            rule=self.vote_rule,
            tolerance=self.tune_tolerance if tolerance is None else tolerance,
        )
        self.nprobe, self.rerank = self.tuning["nprobe"], self.tuning["rerank"]
        self.tuned_at = len(self)
        release_free_heap()  # the tuning's scoring buffers would stay resident otherwise (ocrr.utils.heap)
        return self.tuning

    # -- the index interface --------------------------------------------------------------
    def __len__(self) -> int:
        return self._live if self._staged is None else len(self._staged)

    @property
    def probed_share(self) -> float:
        """About what share of the rows one search reads: its ``nprobe`` lists of ``nlist``
        (every row while the index is not trained yet and searches its staged rows)."""
        if self._staged is not None or not self.nlist:
            return 1.0
        return min(self.nprobe, self.nlist) / self.nlist

    def remove(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, np.int64).reshape(-1)
        self.epoch += 1
        if self._staged is not None:
            self._staged.remove(ids)
            return
        if self.borrowed:
            rows = ids[(ids >= 0) & (ids < self._rows)]
        else:
            rows = np.flatnonzero(np.isin(self._row_ids[: self._rows], ids))
        rows = np.unique(rows[self._alive[rows]])
        if len(rows):
            self._index.remove_ids(_faiss().IDSelectorBatch(len(rows), _faiss().swig_ptr(rows)))
            self._alive[rows] = False
            self._live -= len(rows)

    @property
    def ids(self) -> np.ndarray:
        if self._staged is not None:
            return self._staged.ids
        rows = np.flatnonzero(self._alive[: self._rows])
        return rows.astype(np.int64) if self.borrowed else self._row_ids[rows]

    @property
    def vectors(self) -> np.ndarray:
        if self._staged is not None:
            return self._staged.vectors
        return self._matrix()[np.flatnonzero(self._alive[: self._rows])]

    @property
    def nbytes(self) -> int:
        """Bytes held: list codes and ids, centroids (+ their groups), row bookkeeping, and the
        float32 copy when owned (a borrowed ledger buffer is not counted)."""
        if self._staged is not None:
            return int(self._staged.nbytes)
        faiss = _faiss()
        inv = self._index.invlists
        sizes = np.array([inv.list_size(i) for i in range(self.nlist)], np.int64)
        if self.kind == "ivf_pq":  # fast-scan lists are packed in blocks of bbs codes
            bbs = self._index.bbs
            codes = int((-(-sizes // bbs) * bbs).sum() * self.pq_m // 2)
        else:
            codes = int(sizes.sum() * self._index.code_size)
        quantizer = self.nlist * self.dim * 4
        q = faiss.downcast_index(self._index.quantizer)
        if isinstance(q, faiss.IndexHNSWFlat):
            quantizer += q.hnsw.neighbors.size() * 4 + q.hnsw.offsets.size() * 8
        elif isinstance(q, faiss.IndexIVFFlat):  # the centroids' ids in their groups, the group centres
            quantizer += self.nlist * 8 + q.nlist * self.dim * 4
        own = 0 if self.borrowed else self._own.nbytes + self._row_ids.nbytes
        return int(codes + sizes.sum() * 8 + quantizer + self._alive.nbytes + own)

    def list_sizes(self) -> np.ndarray:
        inv = self._index.invlists
        return np.array([inv.list_size(i) for i in range(self.nlist)], np.int64)

    def candidates(self, queries: np.ndarray, depth: int, nprobe: int | None = None) -> np.ndarray:
        """The ``depth`` best FAISS rows of each query by compressed score (-1: none)."""
        nprobe = min(self.nprobe if nprobe is None else nprobe, self.nlist)
        params = self._search_params(nprobe)
        _, rows = self._index.search(np.ascontiguousarray(queries, np.float32), depth, params=params[0])
        return rows

    def _search_params(self, nprobe: int) -> tuple[Any, Any]:
        """FAISS's search parameters for ``nprobe`` lists, with the quantizer's they point to
        (kept alive with them), made once per index and nprobe: a served query is short
        enough that making them each time showed in its cost."""
        made = self._params
        if made is not None and made[0] is self._index and made[1] == nprobe:
            return made[2]
        faiss = _faiss()
        params = faiss.SearchParametersIVF(nprobe=nprobe)
        qp = None
        quantizer = faiss.downcast_index(self._index.quantizer)
        if isinstance(quantizer, faiss.IndexIVFFlat):
            qp = faiss.SearchParametersIVF(nprobe=groups_to_probe(nprobe, self.nlist, quantizer.nlist))
            params.quantizer_params = qp
        elif isinstance(quantizer, faiss.IndexHNSWFlat):  # an index saved by an older version
            qp = faiss.SearchParametersHNSW(efSearch=max(2 * nprobe, 32))
            params.quantizer_params = qp
        self._params = (self._index, nprobe, (params, qp))  # one assignment: safe for concurrent searches
        return params, qp

    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        if start:
            raise ValueError(f"{self.kind} index cannot search from a row offset (start={start}); search all")
        queries = np.ascontiguousarray(queries, np.float32).reshape(-1, self.dim)
        if self._staged is not None:
            return self._staged.search(queries, k)
        kk = min(k, len(self))
        if kk == 0 or len(queries) == 0:
            return np.empty((len(queries), kk), np.float32), np.empty((len(queries), kk), np.int64)
        rows = self.candidates(queries, max(kk, self.rerank))
        return rerank(queries, rows, self._matrix(), None if self.borrowed else self._row_ids, kk)
