"""Exact search for queries known in advance: one matrix product now, a few rows each later.

A stream's queries are known before it is walked, but a learning system must answer each
with the rows it holds when the query arrives, one or a few at a time: a matrix-vector
product over every row per query, the substrate's largest cost in a run. Most of those rows
(the seed set) are there from the start. ``Anticipated`` scores every expected query
against them in one matrix product and keeps, per query, only the rows that can be in its
top k; when the query comes, those candidates and the rows added since are scored with
the matrix-vector product, and their best k is the full scan's answer, bit for bit:

* a float32 product of ``d`` terms, in any order, is within ``g ||q|| ||v||`` of the exact
  one (``g``: the rounding bound of a ``d``-term sum), so the matrix product's and the
  matrix-vector product's scores of a row differ by at most ``B = 2 g ||q|| max ||v||``;
* a row in the exact top k of the first rows then has a matrix-product score within ``2B``
  of the k-th best one: those rows are the candidates (ties included). A row outside the
  top k of the first rows is outside the top k of all rows;
* the candidates are scored in their aligned groups of rows (``shortlist.aligned_group``),
  the rows added since as one run to the end: the same bits as a one-thread full scan.

Rows removed from the index make the candidates stale: the index then drops them and scans
in full, as it does for a query that was not anticipated.
"""

from __future__ import annotations

import numpy as np

from ocrr.index.shortlist import aligned_group
from ocrr.index.topk import top_k

_U32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32
# Bound the temporary (queries x rows) block of scores to about 64 MB of float32.
_BLOCK_ELEMENTS = 16_000_000
_NORM_MARGIN = 1 + 1e-3  # a float32 norm is within ~1e-5 (relative) of the true one


class Anticipated:
    """Candidates of ``queries`` among rows ``[0, len(vecs))`` for a top-``k`` search.

    ``search(vecs, ids, queries)`` answers as the full scan of ``vecs`` (rows since added
    included) would, or returns None when it cannot (a query not anticipated, rows
    removed): the caller then scans. Built by ``ExactIndex.anticipate``."""

    def __init__(self, vecs: np.ndarray, queries: np.ndarray, k: int):
        self.k = k
        self.group = aligned_group(vecs.shape[1])
        n = len(vecs)
        # Rows from here on are scored at every search, as one run to the end of the matrix.
        self.tail_from = n - n % self.group if self.group else 0
        self._position: dict[bytes, int] = {}
        self._candidates: list[np.ndarray] = []
        if not self.group or n < k or not len(queries):
            return
        queries = np.ascontiguousarray(queries, np.float32)
        norm_max = float(np.max(np.linalg.norm(vecs, axis=1))) * _NORM_MARGIN
        if not np.isfinite(norm_max):
            return  # no bound: every search scans
        d = vecs.shape[1]
        gamma = d * _U32 / (1 - d * _U32)
        head = vecs[: self.tail_from]
        per_block = max(1, _BLOCK_ELEMENTS // max(1, n))
        for lo in range(0, len(queries), per_block):
            block = queries[lo : lo + per_block]
            scores = block @ vecs.T
            kth = top_k(scores, 0, k)[0][:, -1].astype(np.float64)
            bound = np.linalg.norm(block.astype(np.float64), axis=1) * 2 * gamma * norm_max * (1 + 1e-6) + 1e-30
            floor = kth - 2 * bound
            near = scores[:, : len(head)] >= floor[:, None]
            for j in range(len(block)):
                if not np.isfinite(floor[j]):
                    continue  # a query that is not finite: scanned in full
                starts = np.unique(np.flatnonzero(near[j]) // self.group) * self.group
                key = block[j].tobytes()
                if key not in self._position:
                    self._position[key] = len(self._candidates)
                    self._candidates.append((starts[:, None] + np.arange(self.group)).ravel())

    def __len__(self) -> int:
        """Queries anticipated."""
        return len(self._position)

    def search(
        self, vecs: np.ndarray, ids: np.ndarray | int, queries: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Top-``k`` of each query over every row of ``vecs`` (ids: row numbers from ``ids``
        when an int, else one per row), or None if a query was not anticipated."""
        if k != self.k or len(vecs) < self.tail_from:
            return None
        found = [self._position.get(q.tobytes()) for q in queries]
        if None in found:
            return None
        first = self.tail_from
        tail = vecs[first:]  # scored in place, not gathered: it can grow to most of the rows
        tail_ids = ids + first if isinstance(ids, int) else ids[first:]
        sims = np.empty((len(queries), k), np.float32)
        out = np.empty((len(queries), k), np.int64)
        for j, position in enumerate(found):
            assert position is not None  # (checked above)
            rows = self._candidates[position]
            tail_s, tail_i = top_k((tail @ queries[j])[None], tail_ids, k)
            cand_s = np.concatenate([vecs[rows] @ queries[j], tail_s[0]])
            cand_i = np.concatenate([rows + ids if isinstance(ids, int) else ids[rows], tail_i[0]])
            best = np.lexsort((-cand_i, -cand_s))[:k]  # top_k's order: similarity, then id, descending
            sims[j], out[j] = cand_s[best], cand_i[best]
        return sims, out
