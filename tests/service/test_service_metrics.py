"""The service's counter table: each worker writes its own row; /metrics adds them up."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ocrr.service.metrics import BUCKETS, MAX_ROUTES, Counters, Scrape


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


def _samples(text: str) -> dict:
    """{(sample name, sorted labels): value} of a Prometheus text exposition, read by Prometheus's parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_is_the_prometheus_text_of_every_workers_totals():
    table = mp.get_context("spawn").RawArray("d", 2 * Counters.width(MAX_ROUTES))
    a = Counters(["/predict", "/correct"], workers=2, slot=0, shared=table, routes=MAX_ROUTES)
    b = Counters(["/predict", "/correct"], workers=2, slot=1, shared=table, routes=MAX_ROUTES)
    a.request("/predict", 200, 0.002)
    b.request("/predict", 200, 0.3)
    b.request("/correct", 401, 9.0)
    a.publish(commits=3, searches=5, pooled=8, full_scans=1)
    b.publish(commits=4, witness_requests=2, witness_failures=1)
    text = Scrape(a.totals(), entries=10, workers=2, uptime=12.5).text()
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families == {
        "ocrr_requests": "counter",
        "ocrr_request_seconds": "histogram",
        "ocrr_ledger_entries": "gauge",
        "ocrr_ledger_commits": "counter",
        "ocrr_predict_searches": "counter",
        "ocrr_predict_pooled": "counter",
        "ocrr_predict_full_scans": "counter",
        "ocrr_workers": "gauge",
        "ocrr_uptime_seconds": "gauge",
    }  # no witnessing: none of its metrics
    got = _samples(text)
    assert got[("ocrr_requests_total", (("path", "/predict"), ("status", "200")))] == 2
    assert got[("ocrr_requests_total", (("path", "/correct"), ("status", "401")))] == 1
    assert got[("ocrr_request_seconds_bucket", (("le", "0.0025"), ("path", "/predict")))] == 1
    assert got[("ocrr_request_seconds_bucket", (("le", "0.5"), ("path", "/predict")))] == 2
    assert got[("ocrr_request_seconds_bucket", (("le", "5.0"), ("path", "/correct")))] == 0
    assert got[("ocrr_request_seconds_bucket", (("le", "+Inf"), ("path", "/correct")))] == 1
    assert got[("ocrr_request_seconds_sum", (("path", "/predict"),))] == pytest.approx(0.302)
    assert got[("ocrr_ledger_commits_total", ())] == 7 and got[("ocrr_predict_pooled_total", ())] == 8
    assert got[("ocrr_predict_searches_total", ())] == 5 and got[("ocrr_predict_full_scans_total", ())] == 1
    assert got[("ocrr_ledger_entries", ())] == 10 and got[("ocrr_workers", ())] == 2
    assert got[("ocrr_uptime_seconds", ())] == 12.5


def test_a_witnessing_services_scrape_adds_the_witness_metrics_and_the_lag_once_a_head_is_cosigned():
    counters = Counters(["/correct"])
    counters.publish(witness_requests=4, witness_failures=1, witness_refusals=2)
    before = _samples(Scrape(counters.totals(), 10, 1, 1.0, witnessing=True).text())
    assert before[("ocrr_witness_requests_total", ())] == 4 and before[("ocrr_witness_refusals_total", ())] == 2
    assert before[("ocrr_witness_failures_total", ())] == 1 and ("ocrr_witnessed_size", ()) not in before
    after = _samples(Scrape(counters.totals(), 10, 1, 1.0, witnessing=True, witnessed=7).text())
    assert after[("ocrr_witnessed_size", ())] == 7 and after[("ocrr_witness_lag_entries", ())] == 3
