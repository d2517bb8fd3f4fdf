"""IncrementalSearch: a query set is kept from the second time it is asked for, answers
exactly as a full scan, and sets asked for once (a stream's episodes) do not push the
recurring ones (evaluation sets) out."""

from __future__ import annotations

import numpy as np

from ocrr.index.cache import IncrementalSearch
from ocrr.index.exact import ExactIndex


class CountingIndex(ExactIndex):
    """ExactIndex noting where each search started (0: a full scan)."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.starts: list[int] = []

    def search(self, queries, k, start=0):
        self.starts.append(start)
        return super().search(queries, k, start)


def unit(rng, n, dim=24):
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_recurring_sets_are_scanned_incrementally_and_one_off_sets_do_not_evict_them():
    rng = np.random.default_rng(0)
    index = CountingIndex(24)
    index.add(unit(rng, 500), np.arange(500))
    plain = ExactIndex(24)
    plain.add(index.vectors, index.ids)
    cache = IncrementalSearch(index, min_queries=8, max_sets=2)
    evaluation = unit(rng, 40)

    def ask(queries):
        got = cache.search(queries, 5)
        want = plain.search(queries, 5)
        np.testing.assert_array_equal(got[1], want[1])
        # a block of new rows is a product of another shape: BLAS may round a similarity by an ulp
        np.testing.assert_array_max_ulp(got[0], want[0], maxulp=2)

    ask(evaluation)  # first sight: a full scan, not kept
    ask(evaluation)  # second: a full scan, kept
    assert index.starts == [0, 0]
    for _ in range(10):  # episodes, each asked for once
        ask(unit(rng, 16))
    new = unit(rng, 30)
    index.add(new, np.arange(500, 530))
    plain.add(new, np.arange(500, 530))
    index.starts.clear()
    ask(evaluation)
    assert index.starts == [500]  # only the 30 new rows were scanned


def test_small_sets_and_removals_go_to_a_full_scan():
    rng = np.random.default_rng(1)
    index = CountingIndex(24)
    index.add(unit(rng, 300), np.arange(300))
    cache = IncrementalSearch(index, min_queries=8)
    small = unit(rng, 3)
    for _ in range(3):
        cache.search(small, 4)
    evaluation = unit(rng, 20)
    cache.search(evaluation, 4)
    cache.search(evaluation, 4)
    index.remove(np.arange(10))
    index.starts.clear()
    sims, ids = cache.search(evaluation, 4)
    assert index.starts == [0] and not np.isin(ids, np.arange(10)).any()
