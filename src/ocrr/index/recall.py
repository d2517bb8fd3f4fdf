"""Recall@k of an approximate neighbour list against the exact one."""

from __future__ import annotations

from typing import Literal, overload

import numpy as np


@overload
def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, per_query: Literal[False] = False) -> float: ...
@overload
def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, per_query: Literal[True]) -> np.ndarray: ...
def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, per_query: bool = False) -> float | np.ndarray:
    """Mean over queries of |approx ∩ exact| / |exact| (ids < 0 are padding, ignored).

    approx_ids (n, a), exact_ids (n, e): the exact top-k ids of each query. Queries with
    no exact neighbour are skipped (an empty index has recall 1.0 by convention).
    """
    approx_ids = np.asarray(approx_ids, np.int64)
    exact_ids = np.asarray(exact_ids, np.int64)
    if approx_ids.shape[0] != exact_ids.shape[0]:
        raise ValueError("approx and exact results must have one row per query each")
    valid = exact_ids >= 0
    found = (exact_ids[:, :, None] == approx_ids[:, None, :]).any(axis=2) & valid
    denom = valid.sum(axis=1)
    rows = denom > 0
    per = np.ones(len(exact_ids))
    per[rows] = found[rows].sum(axis=1) / denom[rows]
    if per_query:
        return per
    return float(per[rows].mean()) if rows.any() else 1.0
