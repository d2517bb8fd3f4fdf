"""The signed-byte shortlist (index/int8_shortlist.py): its proven bound holds row by row,
and its answers are the full scan's bits, through rows added, removed, clipped and re-coded."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.index import int8_shortlist as module
from ocrr.index.exact import _scan_few, new_shortlist
from ocrr.index.int8_shortlist import Int8Shortlist, dot_is_exact

pytest.importorskip("simsimd")


def full_scan(matrix, queries, k):
    return _scan_few(matrix, 0, queries, k)


def rows(n: int, dim: int, seed: int, clusters: int | None = None) -> np.ndarray:
    """Unit rows; with ``clusters``, near-duplicates around that many centres (near-ties)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    if clusters:
        x = x[rng.integers(0, clusters, n)] + rng.normal(0, 0.01, (n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def near(x: np.ndarray, count: int, seed: int, noise: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q = x[rng.integers(0, len(x), count)] + rng.normal(0, noise, (count, x.shape[1]))
    return np.ascontiguousarray(q, np.float32)


def assert_full_scan(shortlist, matrix, queries, k, ids=None):
    scan_ids = 0 if ids is None else ids
    got = shortlist.search(matrix, queries, k, lambda m, q, kk: _scan_few(m, scan_ids, q, kk), ids)
    want = _scan_few(matrix, scan_ids, queries, k)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("dim", [24, 384])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_answers_are_the_full_scans_bits_on_near_ties_and_duplicates(dim, k):
    x = rows(4000, dim, seed=dim, clusters=200)
    x[::97] = x[0]  # 42 exact copies of one row
    shortlist = Int8Shortlist(dim)
    queries = np.concatenate([near(x, 40, seed=1), x[:3], x[5:6] * 3.0])
    assert_full_scan(shortlist, x, queries, k)
    assert shortlist.queries == len(queries) and shortlist.fallbacks < shortlist.queries / 2


def test_the_bound_holds_for_every_row_and_is_tight_enough_to_prune():
    """|coded score - float32 scan score| <= E for every row and query (the proof, checked),
    and E leaves only a few candidates on clustered unit rows of 384."""
    x = rows(3000, 384, seed=2, clusters=150)
    shortlist = Int8Shortlist(384)
    shortlist.catch_up(x)
    queries = near(x, 50, seed=3)
    bytes_, scale, bound = shortlist._round(queries, shortlist.err_max, shortlist.norm_max, shortlist.code_norm_max)
    dots = module._dots(bytes_, shortlist._codes[: len(x)])
    coded = shortlist._centre * queries.astype(np.float64).sum(axis=1)[:, None] + scale[:, None] * dots
    exact = np.stack([x @ q for q in queries]).astype(np.float64)
    worst = np.abs(coded - exact).max(axis=1)
    assert (worst <= bound).all()
    assert (worst > bound / 20).all()  # the bound is not loose by orders of magnitude
    assert bound.max() < 0.05
    kth = np.sort(coded, axis=1)[:, -5]
    candidates = (coded >= (kth - 2 * bound)[:, None]).sum(axis=1)
    assert np.median(candidates) < 40


def test_rows_added_later_and_removed_rows_are_followed():
    x = rows(3000, 48, seed=4, clusters=100)
    shortlist = Int8Shortlist(48)
    shortlist.grow_ahead()
    queries = near(x, 30, seed=5)
    for n in (1000, 1001, 2500, 3000):
        assert_full_scan(shortlist, x[:n], queries, 5)
    shortlist.join_ahead()
    gone = np.arange(0, 3000, 7)
    shortlist.remove_rows(gone)
    kept = np.delete(x, gone, axis=0)
    assert len(shortlist) == len(kept)
    assert_full_scan(shortlist, kept, queries, 5)
    ids = np.arange(len(kept), dtype=np.int64)[::-1].copy()  # ids not in row order: ties go to the higher id
    assert_full_scan(shortlist, kept, np.concatenate([queries, kept[:2]]), 5, ids)


def test_rows_past_the_range_are_candidates_until_enough_widen_it(monkeypatch):
    monkeypatch.setattr(module, "MAX_OUTSIDE", 3)
    x = rows(2000, 32, seed=6, clusters=80)
    shortlist = Int8Shortlist(32)
    shortlist.catch_up(x[:1500])
    first, err = (shortlist._centre, shortlist._step), shortlist.err_max
    far = np.zeros((4, 32), np.float32)
    far[np.arange(4), np.arange(4)] = 1.0  # a value past every stored one
    x = np.concatenate([x, far])
    for n in (2001, 2002, 2003):  # within the allowance: clipped, kept out of the bound, scored exactly
        assert_full_scan(shortlist, x[:n], np.concatenate([far[:3], near(x, 10, seed=n)]), 5)
    assert (shortlist._centre, shortlist._step) == first and shortlist.err_max == err
    assert shortlist._outside.tolist() == [2000, 2001, 2002]
    shortlist.remove_rows(np.array([5, 2001]))  # the others move down with the rows
    x = np.delete(x, [5, 2001], axis=0)
    assert shortlist._outside.tolist() == [1999, 2000]
    assert_full_scan(shortlist, x, far, 5)  # a third past it (two left): within the allowance
    assert shortlist._outside.tolist() == [1999, 2000, 2001]
    x = np.concatenate([x, -far[:1]])  # a fourth: the range widens, every row coded again
    assert_full_scan(shortlist, x, np.concatenate([far, -far[:1]]), 5)
    assert len(shortlist._outside) == 0 and shortlist._step > first[1]
    assert shortlist.err_max < 0.1  # none clipped (a clipped axis row would be off by ~0.4)


def test_queries_the_codes_cannot_settle_are_scanned_in_full():
    x = rows(1500, 32, seed=7)
    shortlist = Int8Shortlist(32)
    zero = np.zeros((1, 32), np.float32)
    bad = np.full((1, 32), np.nan, np.float32)
    queries = np.concatenate([zero, bad, near(x, 4, seed=8)])
    got = shortlist.search(x, queries, 5, full_scan)
    want = full_scan(x, queries, 5)
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[0][2:], want[0][2:])
    assert shortlist.fallbacks == 2  # the zero and the NaN query; the others from the codes
    assert_full_scan(shortlist, x, x[:1], 1600)  # k past the rows: the full scan


def test_a_dot_product_that_is_not_exact_sends_every_search_to_the_full_scan(monkeypatch):
    assert dot_is_exact(384) and dot_is_exact(1536)
    real = module._dots
    monkeypatch.setattr(module, "_dots", lambda q, c: real(q, c) + (np.abs(real(q, c)) > 1e6))
    module.dot_is_exact.cache_clear()
    try:
        assert not dot_is_exact(384)  # the largest sums are off by one: caught
        x = rows(1200, 384, seed=9)
        shortlist = Int8Shortlist(384)
        assert_full_scan(shortlist, x, near(x, 5, seed=10), 5)
        assert shortlist.fallbacks == shortlist.queries == 5
    finally:
        module.dot_is_exact.cache_clear()


def test_the_factory_names_its_codes():
    assert isinstance(new_shortlist(8, "i8"), Int8Shortlist)
    assert new_shortlist(8, "sq8").code == "sq8"
    with pytest.raises(ValueError, match="'fp16', 'sq8', 'i8'"):
        new_shortlist(8, "int4")


def test_rows_that_are_not_finite_send_every_search_to_the_full_scan():
    x = rows(1200, 32, seed=11)
    shortlist = Int8Shortlist(32)
    assert_full_scan(shortlist, x, near(x, 5, seed=12), 5)
    assert shortlist.fallbacks == 0
    y = np.concatenate([x, np.full((1, 32), np.inf, np.float32), x[:3]])  # a ledger written by another tool
    queries = near(x, 5, seed=13)
    with np.errstate(invalid="ignore"):  # inf times components of either sign
        got = shortlist.search(y, queries, 5, full_scan)
        want = full_scan(y, queries, 5)
    assert np.array_equal(got[0], want[0], equal_nan=True) and np.array_equal(got[1], want[1])
    assert shortlist.fallbacks == 5 and len(shortlist) == len(y)


def test_a_buffer_made_ahead_is_not_taken_over_after_rows_moved_or_were_coded_again(monkeypatch):
    from ocrr.utils import grow_ahead

    monkeypatch.setattr(grow_ahead, "MIN_BYTES", 0)  # make buffers ahead at any size
    monkeypatch.setattr(grow_ahead, "_REST", 0.0)
    x = rows(5000, 16, seed=14, clusters=60)
    queries = near(x, 20, seed=15)
    for change in ("remove", "widen"):
        shortlist = Int8Shortlist(16)
        shortlist.grow_ahead()
        shortlist.catch_up(x[:900])  # 3/4 of the first 1,024-row buffer: the next one is made ahead
        shortlist.join_ahead()
        shortlist.catch_up(x[:1000])
        shortlist.join_ahead()
        matrix = x[:1000]
        if change == "remove":  # the rows below move down in place
            shortlist.remove_rows(np.arange(0, 1000, 3))
            matrix = np.delete(matrix, np.arange(0, 1000, 3), axis=0)
        else:  # one row far past the range, past the allowance of 0: every row coded again
            monkeypatch.setattr(module, "MAX_OUTSIDE", 0)
            matrix = np.concatenate([matrix, 3 * x[:1]])
            shortlist.catch_up(matrix)
            monkeypatch.setattr(module, "MAX_OUTSIDE", 64)
        matrix = np.concatenate([matrix, x[1000:2000]])  # past the buffer, within the one made ahead
        assert_full_scan(shortlist, matrix, queries, 5)
        wide = matrix.astype(np.float64)  # every row's code, as the range in force codes it
        codes = np.clip(np.rint((wide - shortlist._centre) / shortlist._step), -127, 127).astype(np.int8)
        assert len(shortlist) == len(matrix) and np.array_equal(shortlist._codes[: len(matrix)], codes)


@pytest.mark.parametrize("n", [1, 5, 63, 64, 65, 320, 321, 1000, 10_007])
@pytest.mark.parametrize("k", [1, 5, 50])
def test_the_kth_largest_score_is_the_full_partitions(n, k):
    """Integer scores full of ties, some rows out of the running (-inf), in blocks or not."""
    if k > n:
        return
    rng = np.random.default_rng([n, k])
    scores = rng.integers(-40, 40, (4, n)).astype(np.float64)
    scores[1] = 7.0  # every score tied
    scores[2, rng.integers(0, n, n // 3)] = -np.inf
    scores[3, : n // 2] = np.arange(n // 2)  # the top in one run of blocks
    want = np.partition(scores, n - k, axis=1)[:, n - k]
    assert np.array_equal(module.kth_largest(scores, k), want)
