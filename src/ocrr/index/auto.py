"""``auto``: exact search while the index is small, an inverted file once it grows past a threshold.

Below ``threshold`` live entries (default 200 000) exact search is cheap enough and gives
100 % recall: one exact query's cost grows linearly with the entries, and at the threshold
it is still an interactive answer (docs/scale/scale-sigma0.1.md has it from 10k to 1M;
benchmarks/bench_index.py measures it). The first ``add`` that takes the index past the
threshold builds the ``switch_to`` backend from the stored vectors: ``ivf_pq`` (``auto``)
or ``ivf_sq8`` (``auto_sq8``), whose k-means is trained on an even spread of everything
stored and whose re-rank reads the same float32 rows the exact index read (the ledger's
buffer when borrowed), so no vector is copied. IVF rather than HNSW: at 1M entries HNSW at
the paper's settings kept recall@5 0.43 and vote accuracy 0.77 and took far longer to
build (docs/scale/ivf.md), while IVF with re-rank keeps the vote (docs/scale/ivf.md).
``switch_to`` "hnsw" / "hnsw_sq8" gives the old behaviour. The switch is one-way and bumps
``epoch``; ``reason`` says which backend answers and why, and the switch is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ocrr.index.exact import ExactIndex
from ocrr.index.faiss_index import FaissIndex
from ocrr.index.ivf import IVFIndex

DEFAULT_THRESHOLD = 200_000
_BUILD_CHUNK = 65_536
_TRAIN_SAMPLE = 1_000_000  # at most this many stored vectors (an even spread) go to training
log = logging.getLogger("ocrr.index")


class AutoIndex:
    def __init__(
        self,
        dim: int,
        threshold: int = DEFAULT_THRESHOLD,
        compress: str | None = None,
        source: Callable[[], np.ndarray] | None = None,
        switch_to: str | None = None,
        hnsw_params: dict | None = None,
        ivf_params: dict | None = None,
    ):
        if threshold < 0:
            raise ValueError("threshold must be >= 0")
        self.dim = int(dim)
        self.threshold = int(threshold)
        self.compress = compress
        self.switch_to = switch_to or ("ivf_sq8" if compress == "sq8" else "ivf_pq")
        if self.switch_to not in ("ivf", "ivf_sq8", "ivf_pq", "hnsw", "hnsw_sq8"):
            raise ValueError(f"switch_to must be an ivf or hnsw kind, got {self.switch_to!r}")
        self.hnsw_params = dict(hnsw_params or {})
        self.ivf_params = dict(ivf_params or {})
        self._source = source
        self._new_backend()  # validate the parameters now, not at the switch
        self._inner: ExactIndex | FaissIndex | IVFIndex = ExactIndex(dim, source=source)
        self._epoch_offset = 0
        self.switched_at: int | None = None  # live entries when the approximate backend took over
        self.reason = f"exact: 0 live entries <= threshold {self.threshold:,}"

    def _new_backend(self) -> FaissIndex | IVFIndex:
        if self.switch_to.startswith("ivf"):
            return IVFIndex(self.dim, self.switch_to, source=self._source, **self.ivf_params)
        return FaissIndex(self.dim, self.switch_to, **self.hnsw_params)

    @property
    def backend(self) -> ExactIndex | FaissIndex | IVFIndex:
        """The index currently answering searches (ExactIndex, then the approximate one)."""
        return self._inner

    @property
    def name(self) -> str:
        return f"auto({self._inner.name})"

    @property
    def exact(self) -> bool:
        return self._inner.exact

    @property
    def supports_start(self) -> bool:
        return self._inner.supports_start

    @property
    def epoch(self) -> int:
        return self._epoch_offset + self._inner.epoch

    @property
    def nbytes(self) -> int:
        return self._inner.nbytes

    def __len__(self) -> int:
        return len(self._inner)

    @property
    def probed_share(self) -> float:
        """About what share of the rows one search reads (``IVFIndex.probed_share``; 1: all)."""
        return getattr(self._inner, "probed_share", 1.0)

    @property
    def ids(self) -> np.ndarray:
        return self._inner.ids

    @property
    def vectors(self) -> np.ndarray:
        return self._inner.vectors

    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        self._inner.add(vecs, ids)
        if self.switched_at is None:
            if len(self._inner) > self.threshold:
                self._switch()
            else:
                self.reason = f"exact: {len(self._inner):,} live entries <= threshold {self.threshold:,}"

    def remove(self, ids: np.ndarray) -> None:
        self._inner.remove(ids)

    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        return self._inner.search(queries, k, start)

    def _switch(self) -> None:
        exact = self._inner
        assert isinstance(exact, ExactIndex), "the switch happens once, from the exact index"
        new = self._new_backend()
        ids, vecs = exact.ids, exact.vectors
        if isinstance(new, IVFIndex):
            if new.borrowed and not exact.borrowed:  # the exact index had to copy (a removal): so does the IVF
                new = IVFIndex(self.dim, self.switch_to, **self.ivf_params)
            new.build(vecs, ids, train_max=_TRAIN_SAMPLE)  # k-means on an even spread of the stream so far
        else:
            if new.compressed:
                new.train(vecs[:: max(1, len(ids) // max(1, new.min_train))])
            for lo in range(0, len(ids), _BUILD_CHUNK):
                new.add(vecs[lo : lo + _BUILD_CHUNK], ids[lo : lo + _BUILD_CHUNK])
        self._epoch_offset = exact.epoch + 1
        self._inner = new
        self.switched_at = len(ids)
        self.reason = (
            f"{self.switch_to}: {len(ids):,} live entries > threshold {self.threshold:,} "
            f"(exact search costs ~{_exact_ms(len(ids)):.0f} ms per query at this size on one core)"
        )
        log.info("auto index: %s", self.reason)


def _exact_ms(n: int) -> float:
    """One exact 384-d query's cost on one core, scaled linearly from its figure at 1M entries
    (docs/scale/scale-sigma0.1.md); for a log message only."""
    return 179.0 * n / 1_000_000
