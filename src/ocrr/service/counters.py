"""The service's counters, summed over its worker processes.

``ocrr serve --workers N`` answers from N processes; a scrape of ``/metrics`` reaches
one of them, and must still count every request. Each worker writes its own row of a
table of float64 counters (a ``multiprocessing.RawArray`` the supervisor shares with
every worker; a private array with one worker), and ``/metrics`` adds the rows up.
A row has one writer, so no lock between processes is needed; within a worker the
caller serialises its threads.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

#: The statuses counted one by one; any other goes under "other".
STATUSES = (200, 400, 401, 404, 405, 413, 422, 500)
#: Routes a table has room for (the app's own are far fewer); every worker's table has this width.
MAX_ROUTES = 32
#: Upper bounds (seconds, inclusive) of the request-duration histogram's buckets; +Inf is the count.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: What each worker publishes besides its requests (copied from the ledger and the pool).
GAUGES = ("commits", "searches", "pooled", "full_scans", "followed")


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
