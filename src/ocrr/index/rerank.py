"""Exact re-rank: re-score approximate candidates from the float32 vectors.

An IVF search ranks candidates by compressed codes (8-bit or 4-bit PQ), whose scores are
off by more than the gaps between a query's nearest neighbours. Re-scoring the best
``depth`` candidates with the stored float32 vectors gives the vote exact similarities;
only whether a true neighbour made it into the candidates is approximate.
"""

from __future__ import annotations

import numpy as np

from ocrr.index.exact import top_k

#: Candidate rows gathered at once: queries are scored in blocks of about this many bytes of
#: float32 rows, so tuning 600 queries x 1,025 candidates at 10M entries holds ~16 MB of
#: gathered rows (and their expansion) instead of 945 MB (larger blocks still showed in the
#: anonymous peak at 10M: docs/reference/measurements.md).
BLOCK_BYTES = 16 << 20


def score_rows(
    queries: np.ndarray,
    rows: np.ndarray,
    matrix: np.ndarray,
    row_ids: np.ndarray | None,
    block_bytes: int = BLOCK_BYTES,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact similarity of every candidate, in candidate order: (sims, ids), (n, depth),
    -inf / -1 where ``rows`` is -1. ``matrix`` may be on disk (``FileRows``) or memory-mapped:
    only the candidates' rows are read, each once per block of queries, in row order (one
    query's from an array in memory: in its candidates' order). Queries
    are scored ``block_bytes`` of gathered rows at a time; each similarity is the same dot
    product whatever the block, so the result does not depend on it."""
    n, depth = rows.shape
    queries = np.asarray(queries, np.float32)
    ok = rows >= 0
    safe = np.where(ok, rows, 0)
    sims = np.empty((n, depth), np.float32)
    if n == 1 and isinstance(matrix, np.ndarray):
        # One query in memory (a served predict): its candidates gathered as they come.
        # Sorting them first, so that rows on disk are read in order, costs more here than
        # it saves; the products are the same.
        sims[:] = np.einsum("ndk,nk->nd", np.asarray(matrix[safe[0]], np.float32)[None], queries)
    else:
        row_bytes = max(1, depth * queries.shape[1] * 4) if queries.ndim == 2 else 1
        step = max(1, int(block_bytes) // row_bytes)
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            flat, inverse = np.unique(safe[lo:hi], return_inverse=True)
            vecs = np.asarray(matrix[flat], np.float32)[inverse.reshape(hi - lo, depth)]
            sims[lo:hi] = np.einsum("ndk,nk->nd", vecs, queries[lo:hi])
            del vecs
    ids = safe if row_ids is None else row_ids[safe]
    return np.where(ok, sims, -np.inf).astype(np.float32), np.where(ok, ids, -1).astype(np.int64)


def best_k(sims: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``top_k`` of scored candidates, padded with -inf / -1 when there are fewer than k."""
    n, depth = sims.shape
    if depth < k:
        pad = k - depth
        sims = np.concatenate([sims, np.full((n, pad), -np.inf, np.float32)], axis=1)
        ids = np.concatenate([ids, np.full((n, pad), -1, np.int64)], axis=1)
    return top_k(sims, ids, k)


def rerank(
    queries: np.ndarray, rows: np.ndarray, matrix: np.ndarray, row_ids: np.ndarray | None, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each query among its candidate ``rows`` (n, depth; -1 = none), scored as
    ``matrix[row] . query`` in float32. ``row_ids`` maps rows to ids (None: row = id).

    Returns ExactIndex.search's contract: (sims, ids), (n, k), similarity desc then id
    desc; a query with fewer than k candidates is padded with -inf / -1.
    """
    return best_k(*score_rows(queries, rows, matrix, row_ids), k)
