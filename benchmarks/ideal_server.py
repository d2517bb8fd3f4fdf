"""The ideal server for ``bench_service.py``'s latency limit: the same CPU, none of the structure.

An ASGI app that answers every POST with one fixed JSON of a predict's size after spending exactly
``IDEAL_SPIN_MS`` milliseconds of its thread's CPU, on its event loop: no threads, no
locks, no disk, no variance. ``bench_service.py`` starts one uvicorn process per worker
(its connections split evenly, as ``ocrr serve`` balances them), spins each request for the
service's own CPU per request in that phase (less this server's HTTP cost), and drives it
with the same paced load. Its p99 is what a server that costs as much CPU per request would
reach on this box, were every request the same: the part of the service's p99 above it
comes from how the work is arranged (threads, locks, commits, uneven requests), not from
how much there is.

Run by bench_service.py: python -m uvicorn ideal_server:app --app-dir benchmarks
"""

from __future__ import annotations

import json
import os
import time

_SPIN_S = float(os.environ.get("IDEAL_SPIN_MS", "0")) / 1000
# One answer for every POST: a predict's size, with the "ids" the client reads from a correction's.
_ANSWER = json.dumps(
    {
        "predictions": [{"label": "card_arrival", "margin": 0.123456, "votes": {"card_arrival": 5}}],
        "ids": [0],
    }
).encode()
_HEADERS = [(b"content-type", b"application/json")]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    more = True
    while more:  # read the whole body, as the service does
        more = (await receive()).get("more_body", False)
    if scope["method"] == "GET":  # /health, as bench_service's clients ask it first
        body = json.dumps({"worker": os.getpid()}).encode()
    else:
        body = _ANSWER
        until = time.thread_time() + _SPIN_S
        while time.thread_time() < until:  # CPU, not a sleep: the cores are what is shared
            pass
    headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
