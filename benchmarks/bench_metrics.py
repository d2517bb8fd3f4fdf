"""What one scrape of the service's /metrics costs, and what a request pays for the counters.

A request adds to the worker's row of the shared counter table (``Counters.request``: a few
array additions, no lock); a scrape sums every worker's rows and renders them in the Prometheus
text format with ``prometheus_client`` (``Scrape``). The render runs in one of FastAPI's worker
threads and holds the GIL while it runs, so it delays the requests its worker is answering
then: compare its time with the service's p99 budget and with how often Prometheus scrapes.

Prints, best of --repeat runs: microseconds per ``Counters.request``, per ``Counters.totals``
and per render, for a table of --routes routes that have each answered --statuses statuses
(every route's histogram shown), with the load average beside (a shared box slows both alike).
Run: PYTHONPATH=src python benchmarks/bench_metrics.py [--routes 20] [--statuses 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import timeit

from ocrr.service.metrics import MAX_ROUTES, STATUSES, Counters, Scrape


def best_us(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routes", type=int, default=20, help=f"routes that answered (at most {MAX_ROUTES})")
    ap.add_argument("--statuses", type=int, default=3, help=f"statuses each answered (at most {len(STATUSES)})")
    ap.add_argument("--workers", type=int, default=2, help="rows of the table (ocrr serve --workers)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if not (1 <= args.routes <= MAX_ROUTES and 1 <= args.statuses <= len(STATUSES) and args.workers >= 1):
        ap.error(f"need 1 <= --routes <= {MAX_ROUTES}, 1 <= --statuses <= {len(STATUSES)}, --workers >= 1")
    paths = [f"/route{k}" for k in range(args.routes)]
    counters = Counters(paths, workers=args.workers, routes=MAX_ROUTES)
    for path in paths:
        for status in STATUSES[: args.statuses]:
            counters.request(path, status, 0.003)
    totals = counters.totals()
    scrape = Scrape(totals, entries=10_000, workers=args.workers, uptime=60.0, witnessing=True, witnessed=9_990)
    lines = len(scrape.text().splitlines())
    load = os.getloadavg()[0]
    request = best_us(lambda: counters.request("/route0", 200, 0.003), 20_000, args.repeat)
    summed = best_us(counters.totals, 200, args.repeat)
    render = best_us(scrape.text, 50, args.repeat)
    print(
        f"{args.routes} routes x {args.statuses} statuses, {args.workers} workers ({lines} lines of text): "
        f"Counters.request {request:.2f} us, Counters.totals {summed:.0f} us, render (prometheus_client) "
        f"{render:.0f} us per scrape; load average (1 min) {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
    )


if __name__ == "__main__":
    main()
