"""ExactIndex searches of a few queries over many rows go through a float16 shortlist
(ocrr.index.shortlist): every answer must be the plain scan's, bit for bit, ties included."""

from __future__ import annotations

import numpy as np
import pytest
from tests.index import exact_answers
from tests.index.exact_answers import assert_same_answers, index_of, queries_from

from ocrr.index import exact
from ocrr.index import shortlist as shortlist_module
from ocrr.index.exact import ExactIndex
from ocrr.utils.threads import pinned_threads

pytest.importorskip("faiss")

DIM = 24
SHORTLIST_FROM = 4096  # rows of DIM numbers: the threshold these tests set (16 MB by default)


@pytest.fixture(autouse=True)
def small_threshold(monkeypatch):
    monkeypatch.setattr(exact, "SHORTLIST_FROM_FLOATS", SHORTLIST_FROM * DIM)


def tie_heavy_rows(n: int, seed: int) -> np.ndarray:
    return exact_answers.tie_heavy_rows(n, DIM, seed)


def pair(x: np.ndarray, borrowed: bool, ids: np.ndarray | None = None) -> tuple[ExactIndex, ExactIndex]:
    """The same rows in an index with the shortlist and in one without it."""
    return index_of(x, borrowed, ids, shortlist=True), index_of(x, borrowed, ids, shortlist=False)


@pytest.mark.parametrize("borrowed", [True, False], ids=["borrowed", "owned"])
@pytest.mark.parametrize("k", [1, 10, 40])
def test_shortlisted_search_is_the_plain_scan_bit_for_bit(borrowed, k):
    x = tie_heavy_rows(SHORTLIST_FROM + 333, seed=k)
    fast, plain = pair(x, borrowed)
    with pinned_threads(1):  # the shortlist reproduces a one-thread scan (see index/shortlist.py)
        assert_same_answers(fast, plain, queries_from(x, 30, seed=k), k)
    shortlist = fast.shortlist()
    assert shortlist.queries > 0 and shortlist.fallbacks < shortlist.queries  # it answered, not only the fallback


def test_ties_go_to_the_higher_id_when_ids_are_not_in_row_order():
    x = tie_heavy_rows(SHORTLIST_FROM + 100, seed=5)
    ids = np.random.default_rng(5).permutation(len(x)).astype(np.int64) * 3
    fast, plain = pair(x, borrowed=False, ids=ids)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries_from(x, 20, seed=6), 10)


def test_rows_added_after_the_shortlist_and_removals_are_seen():
    x = tie_heavy_rows(SHORTLIST_FROM + 500, seed=7)
    base, later = x[: SHORTLIST_FROM + 100], x[SHORTLIST_FROM + 100 :]
    fast, plain = pair(base, borrowed=False)
    queries = queries_from(x, 15, seed=8)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries, 10)
        for index in (fast, plain):  # one row at a time, as corrections arrive
            for i, row in enumerate(later[:50]):
                index.add(row[None], np.array([len(base) + i]))
        assert_same_answers(fast, plain, queries, 10)
        assert len(fast.shortlist()) == len(fast)
        gone = np.arange(0, len(fast), 50)
        fast.remove(gone)
        plain.remove(gone)
        copy = fast._shortlist
        assert copy is not None and len(copy) == len(fast)  # the removal was applied to it, not re-encoded
        assert_same_answers(fast, plain, queries, 10)
        assert fast._shortlist is copy and len(fast._shortlist) == len(fast)


def test_duplicates_beyond_the_depth_are_scanned_in_full():
    x = tie_heavy_rows(SHORTLIST_FROM + 10, seed=9)
    x[:200] = x[0]  # 200 copies: more than the shortlist's depth
    fast, plain = pair(x, borrowed=True)
    with pinned_threads(1):
        assert_same_answers(fast, plain, x[:1].copy(), 10)
    assert fast.shortlist().fallbacks >= 1


def test_vectors_float16_cannot_hold_are_scanned_in_full():
    x = tie_heavy_rows(SHORTLIST_FROM, seed=10)
    x[17, 3] = 1e6  # beyond float16's range: its rounding error is unbounded
    fast, plain = pair(x, borrowed=True)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries_from(x, 5, seed=11), 10)
    assert fast.shortlist().fallbacks == fast.shortlist().queries


def test_small_indexes_and_start_offsets_do_not_build_a_shortlist():
    x = tie_heavy_rows(SHORTLIST_FROM - 1, seed=12)
    fast, _ = pair(x, borrowed=True)
    fast.search(x[:1], 5)
    assert fast._shortlist is None
    y = tie_heavy_rows(SHORTLIST_FROM + 50, seed=13)
    fast, _ = pair(y, borrowed=True)
    fast.search(y[:1], 5, start=10)  # IncrementalSearch's "new rows only" scan
    assert fast._shortlist is None


def test_a_pickled_index_leaves_its_shortlist_behind_and_makes_its_own():
    import pickle

    x = tie_heavy_rows(SHORTLIST_FROM + 20, seed=14)
    fast, plain = pair(x, borrowed=False)
    queries = queries_from(x, 5, seed=15)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries, 10)
        copy = pickle.loads(pickle.dumps(fast))
        assert copy._shortlist is None
        assert_same_answers(copy, plain, queries, 10)
        assert copy.shortlist() is not fast.shortlist() and copy.shortlist().queries > 0


def test_rows_copied_in_slices_answer_as_rows_copied_at_once(monkeypatch):
    from ocrr.index import shortlist as shortlist_module

    monkeypatch.setattr(shortlist_module, "_ADD_ROWS", 1000)  # a first copy of 4,396 rows in 5 slices
    x = tie_heavy_rows(SHORTLIST_FROM + 300, seed=16)
    fast, plain = pair(x, borrowed=True)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries_from(x, 10, seed=17), 10)
    assert len(fast.shortlist()) == len(x) and fast.shortlist().fallbacks < fast.shortlist().queries


def test_an_index_that_evicts_at_every_step_keeps_one_copy_in_step():
    """A bounded substrate removes an entry for each one it adds: the float16 copy follows
    both, in the index's row order, and is never made again."""
    x = tie_heavy_rows(SHORTLIST_FROM + 400, seed=18)
    fast, plain = pair(x[: SHORTLIST_FROM + 100], borrowed=False)
    queries = queries_from(x, 6, seed=19)
    with pinned_threads(1):
        fast.search(queries[:1], 10)
        copy = fast.shortlist()
        for i, row in enumerate(x[SHORTLIST_FROM + 100 : SHORTLIST_FROM + 160]):
            new_id = SHORTLIST_FROM + 100 + i
            for index in (fast, plain):
                index.remove(np.array([i * 7]))  # out of the middle, like a reservoir
                index.add(row[None], np.array([new_id]))
            got_s, got_i = fast.search(queries[i % len(queries)][None], 10)
            want_s, want_i = plain.search(queries[i % len(queries)][None], 10)
            assert np.array_equal(got_i, want_i) and np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32))
        assert fast.shortlist() is copy and len(copy) == len(fast)
        assert copy.fallbacks < copy.queries


@pytest.mark.parametrize("dim", [24, 384])
def test_candidates_scored_in_the_probed_group_are_the_full_scans_bits(dim):
    group = shortlist_module.aligned_group(dim)
    assert group in shortlist_module._GROUPS  # this machine's BLAS has one
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((5003, dim)).astype(np.float32)
    with pinned_threads(1):
        for _ in range(40):  # random candidate sets, gathered group by group as a search does
            q = rng.standard_normal(dim).astype(np.float32)
            picks = np.unique(rng.choice(len(rows) // group + 1, size=rng.integers(1, 30)))
            cand = (picks[:, None] * group + np.arange(group)).ravel()
            cand = cand[cand < len(rows)]
            assert np.array_equal((rows[cand] @ q).view(np.uint32), (rows @ q)[cand].view(np.uint32))


def test_the_probe_refuses_groups_too_small_for_the_blas_kernel(monkeypatch):
    # a single row (or two) is scored by another kernel than the rows around it in a full scan
    monkeypatch.setattr(shortlist_module, "_GROUPS", (1, 2, 4, 8, 16))
    shortlist_module.aligned_group.cache_clear()
    try:
        assert shortlist_module.aligned_group(DIM) not in (1, 2)
    finally:
        shortlist_module.aligned_group.cache_clear()


def test_without_a_group_that_reproduces_the_scan_every_search_is_a_full_scan(monkeypatch):
    monkeypatch.setattr(shortlist_module, "aligned_group", lambda dim: None)
    x = tie_heavy_rows(SHORTLIST_FROM + 50, seed=12)
    fast, plain = pair(x, borrowed=True)
    queries = queries_from(x, 5, seed=13)
    with pinned_threads(1):
        assert_same_answers(fast, plain, queries, 10)
    copy = fast.shortlist()
    assert copy.group is None and copy.queries > 0 and copy.fallbacks == copy.queries
