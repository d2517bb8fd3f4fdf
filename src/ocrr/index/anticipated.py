"""Exact search for queries known in advance: one matrix product now, a few rows each later.

A stream's queries are known before it is walked, but a learning system must answer each
with the rows it holds when the query arrives, one or a few at a time: a matrix-vector
product over every row per query, the substrate's largest cost in a run. Most of those rows
(the seed set) are there from the start. ``Anticipated`` scores every expected query
against them in one matrix product and keeps, per query, only the rows that can be in its
top k; when the query comes, alone or with others, its candidates and the rows added since
are scored with the matrix-vector product, and their best k is the answer of a full scan for
that query alone, bit for bit:

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

import hashlib

import numpy as np

from ocrr.index.shortlist import NORM_MARGIN, UNIT_ROUNDOFF, aligned_group
from ocrr.index.topk import top_k

# Bound the temporary (queries x rows) block of scores to about 64 MB of float32.
_BLOCK_ELEMENTS = 16_000_000


class Anticipated:
    """Candidates of ``queries`` among rows ``[0, len(vecs))`` for a top-``k`` search.

    ``search(vecs, ids, queries, k)`` answers as the full scan of ``vecs`` (rows since added
    included) would, or returns None when it cannot (a query not anticipated, another k): the
    caller then scans. Per query it keeps a 16-byte digest and the numbers of its candidates'
    aligned groups (a few dozen int32), however long the stream. Built by
    ``ExactIndex.anticipate``."""

    def __init__(self, vecs: np.ndarray, queries: np.ndarray, k: int):
        self.k = k
        self.group = aligned_group(vecs.shape[1])
        n = len(vecs)
        # Rows from here on are scored at every search, as one run to the end of the matrix.
        self.tail_from = n - n % self.group if self.group else 0
        self._position: dict[bytes, int] = {}  # a query's digest -> its number in the lists below
        parts: list[np.ndarray] = []  # per anticipated query, its candidate groups' numbers
        if self.group and n >= k and len(queries):
            self._collect(vecs, np.ascontiguousarray(queries, np.float32), k, parts)
        self._groups = np.concatenate(parts) if parts else np.empty(0, np.int32)
        self._offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts], dtype=np.int64)])

    def _collect(self, vecs: np.ndarray, queries: np.ndarray, k: int, parts: list[np.ndarray]) -> None:
        """Score the queries in blocks and append, per new finite query, the groups below the
        tail that hold a row that can be in its top k (the module's docstring says why)."""
        group = self.group
        assert group is not None
        norm_max = float(np.max(np.linalg.norm(vecs, axis=1))) * NORM_MARGIN
        if not np.isfinite(norm_max):
            return  # no bound: every search scans
        d = vecs.shape[1]
        gamma = d * UNIT_ROUNDOFF / (1 - d * UNIT_ROUNDOFF)
        per_block = max(1, _BLOCK_ELEMENTS // len(vecs))
        for lo in range(0, len(queries), per_block):
            block = queries[lo : lo + per_block]
            scores = block @ vecs.T
            kth = top_k(scores, 0, k)[0][:, -1].astype(np.float64)
            bound = np.linalg.norm(block.astype(np.float64), axis=1) * 2 * gamma * norm_max * (1 + 1e-6) + 1e-30
            floor = kth - 2 * bound
            # row-major: by query, then by column, so each query's group numbers come sorted
            row, col = np.nonzero(scores[:, : self.tail_from] >= floor[:, None])
            groups = (col // group).astype(np.int32)
            new = np.ones(len(row), bool)
            new[1:] = (row[1:] != row[:-1]) | (groups[1:] != groups[:-1])
            row, groups = row[new], groups[new]
            ends = np.searchsorted(row, np.arange(1, len(block) + 1))
            for j in range(len(block)):
                key = _digest(block[j])
                if np.isfinite(floor[j]) and key not in self._position:  # else: scanned; the same query
                    self._position[key] = len(parts)
                    parts.append(groups[ends[j - 1] if j else 0 : ends[j]])

    def __len__(self) -> int:
        """Queries anticipated."""
        return len(self._position)

    def search(
        self, vecs: np.ndarray, ids: np.ndarray | int, queries: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Top-``k`` of each query over every row of ``vecs`` (ids: row numbers from ``ids``
        when an int, else one per row), or None if a query was not anticipated."""
        if k != self.k or len(vecs) < self.tail_from or self.group is None:
            return None
        found = []
        for q in queries:  # an evaluation set is not anticipated: its first query says so
            position = self._position.get(_digest(q))
            if position is None:
                return None
            found.append(position)
        first, within = self.tail_from, np.arange(self.group)
        tail = vecs[first:]  # scored in place, not gathered: it can grow to most of the rows
        tail_ids = np.arange(first, len(vecs)) + ids if isinstance(ids, int) else ids[first:]
        sims = np.empty((len(queries), k), np.float32)
        out = np.empty((len(queries), k), np.int64)
        for j, position in enumerate(found):
            groups = self._groups[self._offsets[position] : self._offsets[position + 1]].astype(np.int64)
            rows = (groups[:, None] * self.group + within).ravel()
            s = np.concatenate([vecs[rows] @ queries[j], tail @ queries[j]])
            i = np.concatenate([rows + ids if isinstance(ids, int) else ids[rows], tail_ids])
            if not np.isfinite(s).all():
                return None  # a row that is not finite: the plain scan decides where it goes
            if len(s) > k:  # the k-th best score, then every row at or above it (ties included)
                at_least = np.flatnonzero(s >= np.partition(s, len(s) - k)[len(s) - k])
                s, i = s[at_least], i[at_least]
            best = np.lexsort((-i, -s))[:k]  # top_k's order: similarity, then id, descending
            sims[j], out[j] = s[best], i[best]
        return sims, out


def _digest(query: np.ndarray) -> bytes:
    """A float32 query's key: 16 bytes of BLAKE2b over its bytes."""
    return hashlib.blake2b(query.tobytes(), digest_size=16).digest()
