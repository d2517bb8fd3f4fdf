"""The service's counter table: each worker writes its own row; /metrics adds them up."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from ocrr.service.metrics import BUCKETS, MAX_ROUTES, Counters


def test_rows_of_several_workers_add_up_with_unknown_paths_and_statuses_under_other():
    table = mp.get_context("spawn").RawArray("d", 2 * Counters.width(MAX_ROUTES))
    a = Counters(["/predict", "/correct"], workers=2, slot=0, shared=table, routes=MAX_ROUTES)
    b = Counters(["/predict", "/correct"], workers=2, slot=1, shared=table, routes=MAX_ROUTES)
    a.request("/predict", 200, 0.002)
    b.request("/predict", 200, 0.004)
    b.request("/correct", 401, 0.001)
    a.request("/nowhere", 418, 0.5)
    a.publish(commits=3, searches=5)
    b.publish(commits=4, followed=3)
    for view in (a, b):  # either worker answers /metrics with the same totals
        got = view.totals()
        assert got["requests"] == {("/predict", 200): 2, ("/correct", 401): 1, ("other", "other"): 1}
        assert got["seconds"]["/predict"] == (pytest.approx(0.006), 2) and got["seconds"]["other"][1] == 1
        assert (got["commits"], got["searches"], got["followed"], got["pooled"]) == (7, 5, 3, 0)


def test_durations_fall_in_their_histogram_buckets_bounds_included_summed_over_workers():
    table = mp.get_context("spawn").RawArray("d", 2 * Counters.width(MAX_ROUTES))
    a = Counters(["/predict"], workers=2, slot=0, shared=table, routes=MAX_ROUTES)
    b = Counters(["/predict"], workers=2, slot=1, shared=table, routes=MAX_ROUTES)
    for seconds in (0.0004, 0.002, 0.0025):  # 0.0025 is a bound: counted at le=0.0025
        a.request("/predict", 200, seconds)
    b.request("/predict", 200, 0.3)
    b.request("/predict", 500, 9.0)  # beyond the last bound: only in +Inf (the count)
    cumulative = dict(zip(BUCKETS, a.totals()["buckets"]["/predict"]))
    assert cumulative[0.001] == 1 and cumulative[0.0025] == 3 and cumulative[0.25] == 3
    assert cumulative[0.5] == cumulative[5.0] == 4 and a.totals()["seconds"]["/predict"][1] == 5


def test_a_table_of_the_wrong_size_or_slot_is_refused():
    with pytest.raises(ValueError, match="slot 2 outside"):
        Counters(["/x"], workers=2, slot=2)
    with pytest.raises(ValueError, match="expected"):
        Counters(["/x"], workers=2, slot=0, shared=mp.get_context("spawn").RawArray("d", 3))
