"""Exact re-rank: re-score approximate candidates from the float32 vectors.

An IVF search ranks candidates by compressed codes (8-bit or 4-bit PQ), whose scores are
off by more than the gaps between a query's nearest neighbours. Re-scoring the best
``depth`` candidates with the stored float32 vectors gives the vote exact similarities;
only whether a true neighbour made it into the candidates is approximate.
"""

from __future__ import annotations

import numpy as np

from ocrr.index.exact import top_k


def rerank(queries: np.ndarray, rows: np.ndarray, matrix: np.ndarray, row_ids: np.ndarray | None,
           k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each query among its candidate ``rows`` (n, depth; -1 = none), scored as
    ``matrix[row] . query`` in float32 (``matrix`` may be memory-mapped: only the
    candidates' rows are read). ``row_ids`` maps rows to ids (None: row = id).

    Returns ExactIndex.search's contract: (sims, ids), (n, k), similarity desc then id
    desc; a query with fewer than k candidates is padded with -inf / -1.
    """
    n, depth = rows.shape
    ok = rows >= 0
    safe = np.where(ok, rows, 0)
    flat, inverse = np.unique(safe, return_inverse=True)  # sorted reads: kinder to a memory-mapped file
    vecs = np.asarray(matrix[flat], np.float32)[inverse.reshape(n, depth)]
    sims = np.einsum("ndk,nk->nd", vecs, np.asarray(queries, np.float32)).astype(np.float32)
    ids = safe if row_ids is None else row_ids[safe]
    sims = np.where(ok, sims, -np.inf).astype(np.float32)
    ids = np.where(ok, ids, -1).astype(np.int64)
    if depth < k:
        pad = k - depth
        sims = np.concatenate([sims, np.full((n, pad), -np.inf, np.float32)], axis=1)
        ids = np.concatenate([ids, np.full((n, pad), -1, np.int64)], axis=1)
    return top_k(sims, ids, k)
