"""Exact top-k selection (ocrr.index.topk): every path answers as a whole-row sort."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.index import ExactIndex
from ocrr.index.topk import _STRIPES_FROM, _top_k_partition, top_k


def sorted_whole(sims: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The plain scan: each row sorted whole by similarity desc, then id desc; its first k."""
    ids = np.broadcast_to(ids, sims.shape)
    order = np.lexsort((-ids, -sims), axis=1)[:, :k]
    return np.take_along_axis(sims, order, axis=1), np.take_along_axis(ids, order, axis=1)


def tied_scores(rng: np.random.Generator, n: int, m: int, levels: int) -> np.ndarray:
    """Similarities from ``levels`` float32 values: ties everywhere, at the k-th place too."""
    grid = np.sort(rng.standard_normal(levels)).astype(np.float32)
    return grid[rng.integers(0, levels, (n, m))]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([1, 2, 7, 33]),
    m=st.sampled_from([1, 5, 100, _STRIPES_FROM - 1, _STRIPES_FROM, 3001, 9000]),
    k=st.integers(1, 40),
    levels=st.sampled_from([1, 2, 5, 50, 100_000]),
    id_kind=st.sampled_from(["shared", "per_row", "first"]),
)
def test_top_k_equals_sorting_each_row_whole(seed, n, m, k, levels, id_kind):
    rng = np.random.default_rng(seed)
    sims = tied_scores(rng, n, m, levels)
    if id_kind == "shared":  # an owned index: any distinct ids, in any order
        ids = rng.permutation(10 * m)[:m].astype(np.int64)
        got = top_k(sims, ids, k)
    elif id_kind == "per_row":  # merging earlier results: ids differ per row
        ids = np.stack([rng.permutation(10 * m)[:m] for _ in range(n)]).astype(np.int64)
        got = top_k(sims, ids, k)
    else:  # a borrowed index: column c is id first + c
        first = int(rng.integers(0, 1000))
        ids = np.arange(first, first + m, dtype=np.int64)
        got = top_k(sims, first, k)
    want = sorted_whole(sims, ids, min(k, m))
    assert got[0].dtype == np.float32 and got[1].dtype == np.int64
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("n", [1, 5, 64])
def test_wide_rows_with_padding_and_infinities(n):
    rng = np.random.default_rng(n)
    m = 3 * _STRIPES_FROM + 17
    sims = tied_scores(rng, n, m, 7)
    sims[:, rng.integers(0, m, 50)] = -np.inf  # padding an approximate index leaves
    sims[0, :] = -np.inf  # a row of nothing but padding
    sims[-1, 5] = np.inf
    ids = np.arange(m, dtype=np.int64)
    ids[sims[0] == -np.inf] = -1
    got = top_k(sims, ids, 5)
    want = sorted_whole(sims, ids, 5)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("n", [1, 4, 40])
def test_rows_with_nan_keep_the_plain_partitions_answer(n):
    rng = np.random.default_rng(0)
    m = 2 * _STRIPES_FROM
    sims = tied_scores(rng, n, m, 20)
    sims[0, 3] = np.nan
    ids = np.arange(m, dtype=np.int64)
    got = top_k(sims, ids, 5)
    want = _top_k_partition(sims, np.broadcast_to(ids, sims.shape), 5)
    assert np.array_equal(got[1], want[1])
    assert np.array_equal(got[0], want[0], equal_nan=True)
    if n > 1:  # the other rows are ordinary
        assert np.array_equal(got[1][1:], sorted_whole(sims[1:], ids, 5)[1])


@pytest.mark.parametrize("m", [3, 50, 255])
def test_a_narrow_row_with_nan_keeps_the_plain_partitions_answer(m):
    """A served query's re-ranked candidates are sorted whole, unless one is NaN."""
    rng = np.random.default_rng(m)
    sims = tied_scores(rng, 1, m, 4)
    sims[0, m // 2] = np.nan
    ids = rng.permutation(10 * m)[:m].astype(np.int64)
    for k in (1, m // 2 + 1, m):
        got = top_k(sims, ids, k)
        want = _top_k_partition(sims, np.broadcast_to(ids, sims.shape), min(k, m))
        assert np.array_equal(got[1], want[1])
        assert np.array_equal(got[0], want[0], equal_nan=True)


def test_the_newest_of_identical_entries_comes_first_at_any_width():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3 * _STRIPES_FROM, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    twins = [10, 2000, 4500, 6000]
    x[twins] = x[77]  # five identical entries
    for borrowed in (False, True):
        index = ExactIndex(16, source=(lambda: x) if borrowed else None)
        index.add(x, np.arange(len(x)))
        for queries in (x[77:78], np.repeat(x[77:78], 9, axis=0)):  # one query, and a matrix product
            sims, ids = index.search(queries, 4)
            assert ids.tolist() == [[6000, 4500, 2000, 77]] * len(queries)
            assert np.all(sims == sims[:, :1])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_q=st.sampled_from([1, 3, 8, 50]), start=st.sampled_from([0, 1, 700]))
def test_exact_index_search_is_the_plain_scan_of_its_products(seed, n_q, start):
    """The fast selection changes nothing: same products (one per query below 8 queries, a
    matrix product above), each row then sorted whole, give the index's answer."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((_STRIPES_FROM + 900, 24)).astype(np.float32)
    x[rng.integers(0, len(x), 300)] = x[5]  # many exact duplicates
    q = np.concatenate([x[5:6], rng.standard_normal((n_q - 1, 24)).astype(np.float32)])
    index = ExactIndex(24, source=lambda: x)
    index.add_from_source(x, np.arange(len(x)))
    rows = x[start:]
    sims = np.stack([rows @ v for v in q]) if n_q < 8 else q @ rows.T
    want = sorted_whole(sims, np.arange(start, len(x)), 5)
    got = index.search(q, 5, start=start)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
