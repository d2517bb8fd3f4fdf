"""The service's metrics: counters summed over its worker processes, the middleware that
times each request, and the Prometheus text ``/metrics`` answers with (``Scrape``,
rendered by ``prometheus_client``).

``ocrr serve --workers N`` answers from N processes; a scrape of ``/metrics`` reaches
one of them, and must still count every request. Each worker writes its own row of a
table of float64 counters (a ``multiprocessing.RawArray`` the supervisor shares with
every worker; a private array with one worker), and ``/metrics`` adds the rows up.
A row has one writer, so no lock between processes is needed; within a worker the
caller serialises its threads.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

#: The statuses counted one by one; any other goes under "other".
STATUSES = (200, 400, 401, 404, 405, 413, 422, 500, 503)
#: Routes a table has room for (the app's own are far fewer); every worker's table has this width.
MAX_ROUTES = 32
#: Upper bounds (seconds, inclusive) of the request-duration histogram's buckets; +Inf is the count.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: What each worker publishes besides its requests (copied from the ledger and the pool).
GAUGES = (
    "commits",
    "searches",
    "pooled",
    "full_scans",
    "followed",
    "witness_requests",  # these three from the process that obtains cosignatures (service/witnessing.py)
    "witness_failures",
    "witness_refusals",
)


class Counters:
    """A (workers x fields) table of counters; this process writes row ``slot``.

    Fields: requests per (path, status), seconds and requests per path, requests per path
    and duration bucket (``BUCKETS``; each request counted in its own bucket only), and ``GAUGES``.
    ``paths``: the routes counted by name (others go under "other"); ``routes``: room for
    that many (every worker must list the same paths in the same order)."""

    def __init__(self, paths: list[str], workers: int = 1, slot: int = 0, shared=None, routes: int | None = None):
        routes = len(paths) if routes is None else routes
        if not 0 <= slot < workers or len(paths) > routes:
            raise ValueError(f"slot {slot} outside 0..{workers - 1}, or {len(paths)} paths for {routes} routes")
        self.paths = [*paths, *[""] * (routes - len(paths)), "other"]
        self._path = {p: i for i, p in enumerate(self.paths) if p}
        self._status = {s: i for i, s in enumerate(STATUSES)}
        self.workers, self.slot = workers, slot
        width = self.width(routes)
        buf = np.zeros(workers * width) if shared is None else np.frombuffer(shared, np.float64)
        if len(buf) != workers * width:
            raise ValueError(f"a shared table of {len(buf)} counters, expected {workers * width}")
        self.table = buf.reshape(workers, width)
        self.row = self.table[slot]
        n_paths, n_status = len(self.paths), len(STATUSES) + 1
        self._req = 0  # offsets of the blocks in a row
        self._sec = n_paths * n_status
        self._cnt = self._sec + n_paths
        self._bucket = self._cnt + n_paths
        self._gauge = self._bucket + n_paths * len(BUCKETS)

    @staticmethod
    def width(n_paths: int) -> int:
        """Counters per worker for ``n_paths`` named routes."""
        n = n_paths + 1
        return n * (len(STATUSES) + 1) + 2 * n + n * len(BUCKETS) + len(GAUGES)

    def request(self, path: str, status: int, seconds: float) -> None:
        p = self._path.get(path, len(self.paths) - 1)
        s = self._status.get(status, len(STATUSES))
        row = self.row
        row[self._req + p * (len(STATUSES) + 1) + s] += 1
        row[self._sec + p] += seconds
        row[self._cnt + p] += 1
        b = bisect_left(BUCKETS, seconds)  # the first bound at or above it
        if b < len(BUCKETS):
            row[self._bucket + p * len(BUCKETS) + b] += 1

    def publish(self, **gauges: float) -> None:
        """This worker's current ``GAUGES`` (totals since it started)."""
        for name, value in gauges.items():
            self.row[self._gauge + GAUGES.index(name)] = value

    def totals(self) -> dict:
        """Every worker's rows added up: {"requests": {(path, status): n}, "seconds":
        {path: (seconds, n)}, "buckets": {path: [requests at most BUCKETS[i] seconds, for each
        i]} (cumulative, as Prometheus histograms count), and each gauge}."""
        total = self.table.sum(axis=0)
        n_status = len(STATUSES) + 1
        requests = {}
        for p, path in enumerate(self.paths):
            if not path:
                continue
            for s, status in enumerate([*STATUSES, "other"]):
                n = total[self._req + p * n_status + s]
                if n:
                    requests[(path, status)] = int(n)
        seconds = {
            path: (float(total[self._sec + p]), int(total[self._cnt + p]))
            for p, path in enumerate(self.paths)
            if total[self._cnt + p]
        }
        nb = len(BUCKETS)
        buckets = {
            path: np.cumsum(total[self._bucket + p * nb : self._bucket + (p + 1) * nb]).astype(int).tolist()
            for p, path in enumerate(self.paths)
            if total[self._cnt + p]
        }
        return {
            "requests": requests,
            "seconds": seconds,
            "buckets": buckets,
            **{g: int(total[self._gauge + i]) for i, g in enumerate(GAUGES)},
        }


class TimeRequests:
    """ASGI middleware handing each request's route, status and seconds to ``record``; plain
    ASGI because Starlette's BaseHTTPMiddleware costs a task per request."""

    def __init__(self, app, record: Callable[[str, int, float], None]):
        self.app, self.record = app, record

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = getattr(scope.get("route"), "path", "other")  # the router records the matched route
            self.record(path, status, time.perf_counter() - t0)


class Scrape(Collector):
    """One scrape of ``/metrics`` as ``prometheus_client`` metric families, rendered in the
    Prometheus text format by ``text()``. The counters stay in the shared table above (a
    request costs a few array additions, no lock); only a scrape goes through the library.

    ``totals``: ``Counters.totals()``; ``witnessing``: the service obtains cosignatures
    (``ocrr serve --witness``), and ``witnessed`` is then the size of the head the quorum
    cosigned (None before the first)."""

    def __init__(
        self,
        totals: dict,
        entries: int,
        workers: int,
        uptime: float,
        witnessing: bool = False,
        witnessed: int | None = None,
    ):
        self.totals, self.entries, self.workers, self.uptime = totals, entries, workers, uptime
        self.witnessing, self.witnessed = witnessing, witnessed

    def text(self) -> str:
        return generate_latest(self).decode("utf-8")

    def collect(self) -> Iterator[Metric]:
        totals = self.totals
        requests = CounterMetricFamily(
            "ocrr_requests_total", "HTTP requests by route and status.", labels=["path", "status"]
        )
        for (path, status), n in sorted(totals["requests"].items(), key=str):
            requests.add_metric([path, str(status)], n)
        yield requests
        seconds = HistogramMetricFamily(
            "ocrr_request_seconds",
            "Time spent answering requests, by route (from the request's arrival in the app to its "
            "last byte handed to the server).",
            labels=["path"],
        )
        for path, (total, n) in sorted(totals["seconds"].items()):
            bounds = [floatToGoString(b) for b in BUCKETS]
            buckets = [*zip(bounds, totals["buckets"][path]), ("+Inf", n)]
            seconds.add_metric([path], buckets, sum_value=total)
        yield seconds
        yield GaugeMetricFamily("ocrr_ledger_entries", "Entries committed to the ledger.", value=self.entries)
        for name, field, doc in _TOTALS:
            yield CounterMetricFamily(name, doc, value=totals[field])
        yield GaugeMetricFamily(
            "ocrr_workers", "Processes answering requests (ocrr serve --workers).", value=self.workers
        )
        yield GaugeMetricFamily("ocrr_uptime_seconds", "Seconds since the service started.", value=self.uptime)
        if not self.witnessing:
            return
        for name, field, doc in _WITNESS_TOTALS:
            yield CounterMetricFamily(name, doc, value=totals[field])
        if self.witnessed is not None:
            yield GaugeMetricFamily(
                "ocrr_witnessed_size",
                "Entries in the checkpoint /checkpoint serves (cosigned by the quorum).",
                value=self.witnessed,
            )
            yield GaugeMetricFamily(
                "ocrr_witness_lag_entries",
                "Entries committed but not yet in a cosigned checkpoint.",
                value=max(0, self.entries - self.witnessed),
            )


# (metric, field of Counters.totals(), help) of the counters a scrape reports as they are.
_TOTALS = (
    (
        "ocrr_ledger_commits_total",
        "commits",
        "Transactions committed since start (group commits), all workers.",
    ),
    ("ocrr_predict_searches_total", "searches", "Searches run for pooled predicts by vector."),
    ("ocrr_predict_pooled_total", "pooled", "Predicts by vector answered by those searches."),
    (
        "ocrr_predict_full_scans_total",
        "full_scans",
        "Pooled queries the shortlist could not settle (scanned in full).",
    ),
)
# The witnessing's (ocrr serve --witness): requests sent to the witnesses, failures and refusals.
_WITNESS_TOTALS = (
    ("ocrr_witness_requests_total", "witness_requests", "add-checkpoint requests sent to the witnesses."),
    (
        "ocrr_witness_failures_total",
        "witness_failures",
        "Witness requests without a valid answer (down, timed out, garbled).",
    ),
    (
        "ocrr_witness_refusals_total",
        "witness_refusals",
        "Checkpoints a witness refused (a fork, a rollback, an unknown log or key).",
    ),
)
