"""Exact re-rank: re-score approximate candidates from the float32 vectors.

An IVF search ranks candidates by compressed codes (8-bit or 4-bit PQ), whose scores are
off by more than the gaps between a query's nearest neighbours. Re-scoring the best
``depth`` candidates with the stored float32 vectors gives the vote exact similarities;
only whether a true neighbour made it into the candidates is approximate.
"""

from __future__ import annotations

import numpy as np

from ocrr.index.exact import top_k


def score_rows(
    queries: np.ndarray, rows: np.ndarray, matrix: np.ndarray, row_ids: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact similarity of every candidate, in candidate order: (sims, ids), (n, depth),
    -inf / -1 where ``rows`` is -1. ``matrix`` may be memory-mapped: only the candidates'
    rows are read, each once, in row order (kinder to a memory-mapped file)."""
    n, depth = rows.shape
    ok = rows >= 0
    safe = np.where(ok, rows, 0)
    flat, inverse = np.unique(safe, return_inverse=True)
    vecs = np.asarray(matrix[flat], np.float32)[inverse.reshape(n, depth)]
    sims = np.einsum("ndk,nk->nd", vecs, np.asarray(queries, np.float32)).astype(np.float32)
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
