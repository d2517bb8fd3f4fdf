"""Exact top-k selection over rows of similarities, in one total order.

Neighbours are ordered by similarity, descending; equal similarities by id, descending
(the more recent entry first). The result therefore never depends on how the work was
chunked, and every search path (exact, cached, re-ranked, merged) answers alike.

Wide rows (a whole index scanned: 800 x 12k similarities) are not partitioned whole.
The columns are dealt into ``g`` stripes (column c goes to stripe c mod g) and each
stripe's maximum taken, a single cheap pass. The k-th largest stripe maximum ``b`` is a
bound: k different stripes hold a value >= b, so the k-th largest similarity is >= b,
and the exact top k is among the few columns >= b. Those candidates, ties included, are
then ordered exactly. Rows holding a NaN keep the plain partition's answer.
"""

from __future__ import annotations

import numpy as np

# Rows narrower than this (merges of earlier results, small indexes) are partitioned directly.
_STRIPES_FROM = 2048
# Stripes per row (at least 4k): more make the bound tighter and its partition dearer.
_STRIPES = 512
# A single row narrower than this (a served query's re-ranked candidates) is sorted whole.
_SORT_BELOW = 256


def top_k(sims: np.ndarray, ids: np.ndarray | int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k columns of each row of ``sims`` (n, m) whose ids are ``ids``: (m,) shared by
    every row, (n, m) per row (when merging earlier results with new ones), or an int
    ``first`` meaning column c has id first + c (an index whose ids are its row numbers).

    Returns (sims, ids), both (n, k'), with k' = min(k, m); ties ordered by id desc.
    """
    n, m = sims.shape
    kk = min(k, m)
    if kk == 0:
        return np.empty((n, 0), np.float32), np.empty((n, 0), np.int64)
    if n == 1 and m < _SORT_BELOW:
        return _top_k_sorted(sims, ids, kk)
    if m < _STRIPES_FROM or 16 * kk > m:
        return _top_k_partition(sims, _id_matrix(ids, n, m), kk)
    if n == 1:
        return _top_k_one(sims, ids, kk)
    return _top_k_striped(sims, ids, kk)


def _id_matrix(ids: np.ndarray | int, n: int, m: int) -> np.ndarray:
    if isinstance(ids, (int, np.integer)):
        ids = np.arange(int(ids), int(ids) + m, dtype=np.int64)
    return np.broadcast_to(ids, (n, m))


def _ids_at(ids: np.ndarray | int, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The ids of the entries (rows[i], cols[i]) of a (n, m) block of similarities."""
    if isinstance(ids, (int, np.integer)):
        return cols.astype(np.int64) + int(ids)
    ids = np.asarray(ids)
    return ids[cols] if ids.ndim == 1 else np.broadcast_to(ids, shape)[rows, cols]


def _top_k_striped(sims: np.ndarray, ids: np.ndarray | int, kk: int) -> tuple[np.ndarray, np.ndarray]:
    n, m = sims.shape
    stripe_max = _stripe_maxima(sims, min(m // 4, max(_STRIPES, 4 * kk)))
    g = stripe_max.shape[1]
    bound = np.partition(stripe_max, g - kk, axis=1)[:, g - kk]
    plain = np.isnan(stripe_max).any(axis=1)  # NaN: leave such a row to the plain partition
    if plain.any():
        if plain.all():
            return _top_k_partition(sims, _id_matrix(ids, n, m), kk)
        bound = np.where(plain, np.inf, bound)  # no candidates there; filled in below
    flat = np.flatnonzero(sims >= bound[:, None])  # row-major: candidates grouped by row
    rows, cols = np.divmod(flat, m)
    cand_s = sims[rows, cols]
    cand_i = _ids_at(ids, rows, cols, sims.shape)
    # Each row's candidates in top-k order: row, then similarity desc, then id desc.
    order = np.lexsort((-cand_i, -cand_s, rows))
    if n == 1:
        take = order[None, :kk]
    else:
        counts = np.bincount(rows, minlength=n)
        starts = np.cumsum(counts) - counts
        starts[plain] = 0  # rows without candidates: overwritten below
        take = order[starts[:, None] + np.arange(kk)]  # a row without NaN has >= kk candidates
    out_s, out_i = cand_s[take], cand_i[take]
    if plain.any():
        bad = np.flatnonzero(plain)
        out_s[bad], out_i[bad] = _top_k_partition(sims[bad], _id_matrix(ids, n, m)[bad], kk)
    return out_s, out_i


def _top_k_one(sims: np.ndarray, ids: np.ndarray | int, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """``_top_k_striped`` for a single row (a served query), in as few numpy calls as it takes:
    right after the matrix-vector product each distinct call finds its code and data evicted
    from the caches by the scanned rows, so the calls, not the elements, are the cost."""
    row = sims[0]
    g = min(len(row) // 4, max(_STRIPES, 4 * kk))
    # The bound, and in the last place the maximum: NaN if the row holds one (NaN sorts last).
    part = np.partition(_stripe_maxima(sims, g)[0], (g - kk, g - 1))
    if part[-1] != part[-1]:  # the plain partition decides where a NaN is
        return _top_k_partition(sims, _id_matrix(ids, 1, len(row)), kk)
    cols = np.flatnonzero(row >= part[g - kk])
    cand_s = row[cols]
    if isinstance(ids, (int, np.integer)):  # ids are row numbers from ``ids`` on
        cand_i = cols + int(ids)
    else:
        cand_i = _ids_at(ids, np.zeros_like(cols), cols, sims.shape)
    order = np.lexsort((-cand_i, -cand_s))[:kk]
    return cand_s[order][None], cand_i[order][None]


def _top_k_sorted(sims: np.ndarray, ids: np.ndarray | int, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """One narrow row sorted whole in the total order: the same pairs as the partition in a
    handful of numpy calls (each call costs more than sorting a few hundred values)."""
    row = sims[0]
    if np.isnan(row).any():  # the plain partition decides where a NaN is
        return _top_k_partition(sims, _id_matrix(ids, 1, len(row)), kk)
    if isinstance(ids, (int, np.integer)):
        row_ids = np.arange(int(ids), int(ids) + len(row), dtype=np.int64)
    else:
        row_ids = np.asarray(ids).reshape(len(row))  # (m,) shared, or this row's (1, m)
    order = np.lexsort((-row_ids, -row))[:kk]
    return row[order][None], row_ids[order][None]


def _stripe_maxima(sims: np.ndarray, g: int) -> np.ndarray:
    """(n, g): the maximum of each row's columns c with c mod g = j, for each stripe j."""
    n, m = sims.shape
    blocks = m // g
    if n < 16:  # few rows: one reduction call
        out = sims[:, : blocks * g].reshape(n, blocks, g).max(axis=1)
    else:  # many rows: an elementwise maximum per block streams the rows (numpy's middle-axis max does not)
        out = sims[:, :g].copy()
        for b in range(1, blocks):
            np.maximum(out, sims[:, b * g : (b + 1) * g], out=out)
    tail = m - blocks * g
    if tail:
        np.maximum(out[:, :tail], sims[:, blocks * g :], out=out[:, :tail])
    return out


def _top_k_partition(sims: np.ndarray, ids: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """The plain selection: partition each whole row, then order the k (ids: (n, m))."""
    n, m = sims.shape
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
