"""``auto``: exact search while the index is small, HNSW once it grows past a threshold.

Below ``threshold`` live entries (default 200 000) exact search is cheap enough
and gives 100 % recall. Measured here (benchmarks/bench_index.py, 384-d, one core):
one exact query costs 1.3 ms at 10k, 17 ms at 100k, 179 ms at 1M entries -- about
35 ms at the threshold -- while HNSW (efSearch 64) answers in 0.3-0.6 ms at every
scale, with recall@5 0.96 at 100k and 0.43 at 1M on the sigma-0.1 clustered set. So
the default keeps exact search as long as a query stays within tens of ms, and
switches before recall would be lost on small stores for no gain. The first ``add`` that takes the index past the
threshold builds an HNSW index (``compress="sq8"``: HNSW over 8-bit codes) from the
stored vectors, in id order, and drops the exact index (its own copy, if it had one;
a borrowed ledger buffer is left alone). The switch is one-way and bumps ``epoch``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ocrr.index.exact import ExactIndex
from ocrr.index.faiss_index import FaissIndex

DEFAULT_THRESHOLD = 200_000
_BUILD_CHUNK = 65_536


class AutoIndex:
    def __init__(self, dim: int, threshold: int = DEFAULT_THRESHOLD, compress: str | None = None,
                 source: Callable[[], np.ndarray] | None = None, **hnsw_params):
        if threshold < 0:
            raise ValueError("threshold must be >= 0")
        self.dim = int(dim)
        self.threshold = int(threshold)
        self.compress = compress
        self.hnsw_params = hnsw_params
        FaissIndex(dim, self._hnsw_kind, **hnsw_params)  # validate the parameters now, not at the switch
        self._inner: ExactIndex | FaissIndex = ExactIndex(dim, source=source)
        self._epoch_offset = 0
        self.switched_at: int | None = None  # live entries when HNSW took over

    @property
    def _hnsw_kind(self) -> str:
        return "hnsw_sq8" if self.compress == "sq8" else "hnsw"

    @property
    def backend(self):
        """The index currently answering searches (ExactIndex, then FaissIndex)."""
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
    def ids(self) -> np.ndarray:
        return self._inner.ids

    @property
    def vectors(self) -> np.ndarray:
        return self._inner.vectors

    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        self._inner.add(vecs, ids)
        if self.switched_at is None and len(self._inner) > self.threshold:
            self._switch()

    def remove(self, ids: np.ndarray) -> None:
        self._inner.remove(ids)

    def search(self, queries: np.ndarray, k: int, start: int = 0):
        return self._inner.search(queries, k, start)

    def _switch(self) -> None:
        exact = self._inner
        hnsw = FaissIndex(self.dim, self._hnsw_kind, **self.hnsw_params)
        ids, vecs = exact.ids, exact.vectors
        if hnsw.compressed:
            # Train on an even spread of what is stored (the stream so far), not just its head.
            step = max(1, len(ids) // max(1, hnsw.min_train))
            hnsw.train(vecs[::step])
        for lo in range(0, len(ids), _BUILD_CHUNK):
            hnsw.add(vecs[lo : lo + _BUILD_CHUNK], ids[lo : lo + _BUILD_CHUNK])
        self._epoch_offset = exact.epoch + 1
        self._inner = hnsw
        self.switched_at = len(ids)
