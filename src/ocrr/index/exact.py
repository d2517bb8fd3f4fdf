"""Exact inner-product search with numpy: chunked matrix products, deterministic ties.

Neighbours are ordered by similarity, descending; equal similarities are ordered by
id, descending (the more recent entry first), so that the result is a total order and
does not depend on how the work was chunked.
"""

from __future__ import annotations

import numpy as np

# Bound the temporary (queries x entries) similarity block to about 64 MB of float32.
_BLOCK_ELEMENTS = 16_000_000


def top_k(sims: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k columns of each row of ``sims`` (n, m) whose ids are ``ids``: (m,) shared by
    every row, or (n, m) per row (when merging earlier results with new ones).

    Returns (sims, ids), both (n, k'), with k' = min(k, m); ties ordered by id desc.
    """
    n, m = sims.shape
    ids = np.broadcast_to(ids, (n, m))
    kk = min(k, m)
    if kk == 0:
        return np.empty((n, 0), np.float32), np.empty((n, 0), np.int64)
    if kk < m:
        part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
    else:
        part = np.broadcast_to(np.arange(m), (n, m)).copy()
    part_sims = np.take_along_axis(sims, part, axis=1)
    # Rows where a tie straddles the k-th place need the exact tie order: rare, so fix them one by one.
    if kk < m:
        kth = part_sims.min(axis=1, keepdims=True)
        n_at_least = (sims >= kth).sum(axis=1)
        for row in np.flatnonzero(n_at_least > kk):
            cand = np.flatnonzero(sims[row] >= kth[row, 0])
            order = np.lexsort((-ids[row, cand], -sims[row, cand]))[:kk]
            part[row] = cand[order]
            part_sims[row] = sims[row, cand[order]]
    part_ids = np.take_along_axis(ids, part, axis=1)
    order = np.lexsort((-part_ids, -part_sims), axis=1)
    return np.take_along_axis(part_sims, order, axis=1), np.take_along_axis(part_ids, order, axis=1)


class ExactIndex:
    """Brute-force search over a growing float32 matrix of unit vectors.

    The index does not own the vectors: ``source`` is a callable returning the current
    (n, d) matrix (for the substrate, the ledger's vector buffer), and ``ids`` maps
    its rows to entry ids. Adding means telling the index about more rows.
    """

    name = "exact"

    def __init__(self, dim: int):
        self.dim = dim
        self._vecs = np.empty((0, dim), np.float32)
        self._ids = np.empty(0, np.int64)
        self._n = 0
        self.epoch = 0  # bumped whenever rows are removed: cached partial results become stale

    def __len__(self) -> int:
        return self._n

    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        """Append rows (capacity doubles, so appends are amortised O(1))."""
        vecs = np.asarray(vecs, np.float32).reshape(-1, self.dim)
        ids = np.asarray(ids, np.int64).reshape(-1)
        need = self._n + len(ids)
        if need > len(self._ids):
            cap = max(need, 2 * len(self._ids), 1024)
            grown_v = np.empty((cap, self.dim), np.float32)
            grown_v[: self._n] = self._vecs[: self._n]
            grown_i = np.empty(cap, np.int64)
            grown_i[: self._n] = self._ids[: self._n]
            self._vecs, self._ids = grown_v, grown_i
        self._vecs[self._n : need] = vecs
        self._ids[self._n : need] = ids
        self._n = need

    def remove(self, ids: np.ndarray) -> None:
        """Drop entries by id (used by bounded variants); order of the rest is kept."""
        keep = ~np.isin(self._ids[: self._n], np.asarray(ids, np.int64))
        kept = int(keep.sum())
        self._vecs[:kept] = self._vecs[: self._n][keep]
        self._ids[:kept] = self._ids[: self._n][keep]
        self._n = kept
        self.epoch += 1

    @property
    def ids(self) -> np.ndarray:
        return self._ids[: self._n]

    @property
    def vectors(self) -> np.ndarray:
        return self._vecs[: self._n]

    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of each query over rows ``start:`` of the index.

        Returns (sims, ids) of shape (n_queries, min(k, rows)). Queries are processed
        in blocks so memory stays bounded for any index size.
        """
        vecs = self._vecs[start : self._n]
        ids = self._ids[start : self._n]
        n_q = queries.shape[0]
        kk = min(k, len(ids))
        out_s = np.empty((n_q, kk), np.float32)
        out_i = np.empty((n_q, kk), np.int64)
        if kk == 0 or n_q == 0:
            return out_s, out_i
        rows_per_block = max(1, _BLOCK_ELEMENTS // max(1, len(ids)))
        for lo in range(0, n_q, rows_per_block):
            hi = min(n_q, lo + rows_per_block)
            sims = queries[lo:hi] @ vecs.T
            out_s[lo:hi], out_i[lo:hi] = top_k(sims, ids, kk)
        return out_s, out_i
