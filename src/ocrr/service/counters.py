"""The service's counters, summed over its worker processes.

``ocrr serve --workers N`` answers from N processes; a scrape of ``/metrics`` reaches
one of them, and must still count every request. Each worker writes its own row of a
table of float64 counters (a ``multiprocessing.RawArray`` the supervisor shares with
every worker; a private array with one worker), and ``/metrics`` adds the rows up.
A row has one writer, so no lock between processes is needed; within a worker the
caller serialises its threads.
"""

from __future__ import annotations

import numpy as np

#: The statuses counted one by one; any other goes under "other".
STATUSES = (200, 400, 401, 404, 405, 413, 422, 500)
#: Routes a table has room for (the app's own are far fewer); every worker's table has this width.
MAX_ROUTES = 32
#: What each worker publishes besides its requests (copied from the ledger and the pool).
GAUGES = ("commits", "searches", "pooled", "full_scans", "followed")


class Counters:
    """A (workers x fields) table of counters; this process writes row ``slot``.

    Fields: requests per (path, status), seconds and requests per path, and ``GAUGES``.
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
        self._gauge = self._cnt + n_paths

    @staticmethod
    def width(n_paths: int) -> int:
        """Counters per worker for ``n_paths`` named routes."""
        n = n_paths + 1
        return n * (len(STATUSES) + 1) + 2 * n + len(GAUGES)

    def request(self, path: str, status: int, seconds: float) -> None:
        p = self._path.get(path, len(self.paths) - 1)
        s = self._status.get(status, len(STATUSES))
        row = self.row
        row[self._req + p * (len(STATUSES) + 1) + s] += 1
        row[self._sec + p] += seconds
        row[self._cnt + p] += 1

    def publish(self, **gauges: float) -> None:
        """This worker's current ``GAUGES`` (totals since it started)."""
        for name, value in gauges.items():
            self.row[self._gauge + GAUGES.index(name)] = value

    def totals(self) -> dict:
        """Every worker's rows added up: {"requests": {(path, status): n}, "seconds":
        {path: (seconds, n)}, and each gauge}."""
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
        seconds = {path: (float(total[self._sec + p]), int(total[self._cnt + p]))
                   for p, path in enumerate(self.paths) if total[self._cnt + p]}
        return {"requests": requests, "seconds": seconds,
                **{g: int(total[self._gauge + i]) for i, g in enumerate(GAUGES)}}
