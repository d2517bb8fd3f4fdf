"""ExactIndex.anticipate: queries known in advance are pre-scored against the rows held then;
every later search of a few of them must be the plain scan's answer, bit for bit, ties
included, with rows added since, and must fall back to the scan where it cannot know."""

from __future__ import annotations

import numpy as np
import pytest
from tests.index.exact_answers import assert_same_answers, index_of, queries_from, tie_heavy_rows

from ocrr.index import exact
from ocrr.index.exact import ExactIndex
from ocrr.index.shortlist import aligned_group
from ocrr.utils.threads import pinned_threads


def smooth_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit rows in tight clusters: many near-ties, where a matrix product and a
    matrix-vector product round the same row's score differently."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, dim))
    x = centres[rng.integers(0, 8, n)] + 0.02 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def plain_scan(monkeypatch):
    """The plain scan, which searches of the index may no longer use: their answers must come
    from the candidates."""
    original = exact._scan_few

    def forbidden(*args):
        raise AssertionError("an anticipated search scanned every row")

    monkeypatch.setattr(exact, "_scan_few", forbidden)
    return original


@pytest.mark.parametrize("dim", [24, 384])
@pytest.mark.parametrize("rows", [tie_heavy_rows, smooth_rows], ids=["ties", "clusters"])
@pytest.mark.parametrize("borrowed", [True, False], ids=["borrowed", "owned"])
@pytest.mark.parametrize("k", [1, 10, 40])
def test_anticipated_search_is_the_plain_scan_bit_for_bit(dim, rows, borrowed, k):
    x = rows(2003, dim, seed=k)  # not a whole number of aligned groups
    queries = queries_from(x, 20, seed=k + 1)
    fast, plain = index_of(x, borrowed), index_of(x, borrowed)
    with pinned_threads(1):  # the candidates reproduce a one-thread scan (index/anticipated.py)
        fast.anticipate(queries, k)
        assert fast._anticipated is not None and len(fast._anticipated) > 0
        assert_same_answers(fast, plain, queries, k, widths=(1, 2, 7))


def test_many_anticipated_queries_at_once_answer_as_one_query_searches():
    x = smooth_rows(2003, 384, seed=21)
    queries = queries_from(x, 30, seed=22)
    fast, plain = index_of(x, borrowed=True), index_of(x, borrowed=True)
    with pinned_threads(1):
        fast.anticipate(queries, 10)
        for lo, hi in [(0, 8), (3, 40), (0, 60)]:  # the matrix-product path's sizes, without the hint
            got_s, got_i = fast.search(queries[lo:hi], 10)
            one = [plain.search(q[None], 10) for q in queries[lo:hi]]
            assert np.array_equal(got_i, np.concatenate([i for _, i in one]))
            assert np.array_equal(got_s.view(np.uint32), np.concatenate([s for s, _ in one]).view(np.uint32))


def test_the_matrix_product_rounds_some_scores_otherwise_so_the_bound_is_needed():
    # Were both products always the same bits, the test above would not test the bound.
    x = smooth_rows(2003, 384, seed=3)
    queries = queries_from(x, 50, seed=4)
    with pinned_threads(1):
        by_matrix = queries @ x.T
        by_vector = np.stack([x @ q for q in queries])
    assert not np.array_equal(by_matrix, by_vector)


@pytest.mark.parametrize("borrowed", [True, False], ids=["borrowed", "owned"])
@pytest.mark.parametrize("start", [1801, 101], ids=["most-rows-anticipated", "most-rows-added"])
def test_rows_added_after_anticipating_are_searched_without_a_full_scan(borrowed, start, plain_scan):
    dim = 384
    x = smooth_rows(3000, dim, seed=5)
    queries = queries_from(x, 25, seed=6)  # (start: not on a group boundary)
    grown = np.empty_like(x)
    grown[:start] = x[:start]
    count = [start]
    if borrowed:  # the lender's array grows as a ledger's does
        fast = ExactIndex(dim, source=lambda: grown[: count[0]], shortlist=False)
        fast.add_from_source(x[:start], np.arange(start))
    else:
        fast = index_of(x[:start], borrowed=False)
    with pinned_threads(1):
        fast.anticipate(queries, 10)
        for i in range(start, len(x), 7):  # corrections arrive between searches
            hi = min(len(x), i + 7)
            grown[i:hi] = x[i:hi]
            count[0] = hi
            if borrowed:
                fast.add_from_source(x[i:hi], np.arange(i, hi))
            else:
                fast.add(x[i:hi], np.arange(i, hi))
            q = queries[(i // 7) % len(queries)][None]
            got, want = fast.search(q, 10), plain_scan(x[:hi], 0, q, 10)
            assert np.array_equal(got[1], want[1]), i
            assert np.array_equal(got[0].view(np.uint32), want[0].view(np.uint32)), i


def test_ids_out_of_row_order_keep_the_tie_order():
    x = tie_heavy_rows(1500, 24, seed=7)
    ids = np.random.default_rng(7).permutation(len(x)).astype(np.int64) * 3
    queries = queries_from(x, 20, seed=8)
    fast, plain = index_of(x, False, ids), index_of(x, False, ids)
    with pinned_threads(1):
        fast.anticipate(queries, 10)
        assert_same_answers(fast, plain, queries, 10)


def test_what_cannot_be_known_is_scanned():
    x = tie_heavy_rows(1500, 24, seed=9)
    queries = queries_from(x, 10, seed=10)
    other = queries_from(x, 5, seed=11)
    fast, plain = index_of(x, False), index_of(x, False)
    with pinned_threads(1):
        fast.anticipate(queries, 10)
        assert_same_answers(fast, plain, other, 10)  # never anticipated
        assert_same_answers(fast, plain, np.concatenate([queries[:2], other[:1]]), 10)  # one of three unknown
        assert_same_answers(fast, plain, queries, 5)  # another k
        nan = np.full((1, 24), np.nan, np.float32)  # a row added since that is not finite
        fast.add(nan, np.array([len(x)]))
        plain.add(nan, np.array([len(x)]))
        assert_same_answers(fast, plain, queries, 10)
        gone = np.arange(0, len(x), 40)
        fast.remove(gone)
        plain.remove(gone)
        assert fast._anticipated is None  # its candidates were chosen among rows that moved
        assert_same_answers(fast, plain, queries, 10)


def test_degenerate_inputs_anticipate_nothing():
    x = tie_heavy_rows(50, 24, seed=12)
    index = index_of(x, False)
    index.anticipate(x[:3], 60)  # fewer rows than k
    assert len(index._anticipated) == 0
    index.anticipate(np.full((2, 24), np.nan, np.float32), 5)  # no finite score
    assert len(index._anticipated) == 0
    index.anticipate(np.empty((0, 24), np.float32), 5)
    assert len(index._anticipated) == 0


def test_a_pickled_index_leaves_what_it_anticipated_behind():
    import pickle

    x = tie_heavy_rows(500, 24, seed=13)
    index = index_of(x, False)
    index.anticipate(x[:10], 5)
    copy = pickle.loads(pickle.dumps(index))
    assert copy._anticipated is None
    assert np.array_equal(copy.search(x[:3], 5)[1], index.search(x[:3], 5)[1])


def test_this_blas_has_an_aligned_group():
    # Without one, anticipating does nothing and every search scans: say so here first.
    assert aligned_group(384) is not None and aligned_group(24) is not None
