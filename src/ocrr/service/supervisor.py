"""``ocrr serve --workers N``: N processes answering on one port, over one ledger file.

One Python process answers at most what one GIL allows (measured: ~700 requests/s of
predicts and corrections, a core and a half), so on a box with more cores the service
runs N workers, each a full copy of the app with its own substrate and its own SQLite
connection to the same ledger file. The kernel hands each new connection to one of them
(each listens on its own socket of that port). They agree on the ledger: a worker's commit
first takes in, checked, what the others committed, and every predict, head and proof
first takes in what is new (``DurableLedger.refresh``), so any worker answers for every
correction acknowledged before the request arrived, whichever worker acknowledged it.

The ``ocrr serve`` process checks the ledger once, fully, and seeds it if asked, before
any worker starts (``server.serve``); workers then open it from that checkpoint. The
supervisor (``supervise``, in that process) restarts a worker that dies, and on SIGTERM /
SIGINT stops them all the way uvicorn stops (requests in flight are answered, commits in
flight land), then exits.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.context import SpawnProcess
from typing import Any

from ocrr.service.metrics import MAX_ROUTES, Counters


def bind(host: str, port: int, listen: bool) -> socket.socket:
    """A socket on (host, port) that other sockets of this user may share (SO_REUSEPORT).
    The supervisor binds one without listening, to claim the port; each worker listens on
    its own, and the kernel spreads new connections over the listening ones evenly (one
    shared socket would hand most of them to whichever worker wakes first)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def supervise(workers: int, sock: socket.socket, target: Callable, config: Any, log: Callable[[str], None]) -> int:
    """Run ``target(config, slot, workers, table)`` in ``workers`` processes until a
    signal asks to stop; restart any that dies meanwhile. Returns the exit status."""
    ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited threads or locks
    table = ctx.RawArray("d", workers * Counters.width(MAX_ROUTES))
    procs: dict[int, SpawnProcess] = {}
    stopping: list[int] = []

    def start(slot: int) -> None:
        proc = ctx.Process(target=target, args=(config, slot, workers, table), name=f"ocrr-worker-{slot}")
        proc.start()
        procs[slot] = proc

    def stop(signum, frame) -> None:
        stopping.append(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for slot in range(workers):
            start(slot)
        restarted: dict[int, float] = {}  # slot -> when it was last started again
        while not stopping:
            wait([p.sentinel for p in procs.values()], timeout=0.5)
            for slot, proc in list(procs.items()):
                if proc.exitcode is not None and not stopping:
                    if time.monotonic() - restarted.get(slot, -1e9) < 60:  # a crash loop: do not spin
                        log(
                            f"worker {slot} stopped again within a minute (exit status {proc.exitcode}); "
                            "stopping the service: see the worker's error above"
                        )
                        stopping.append(0)
                        break
                    log(f"worker {slot} stopped (exit status {proc.exitcode}); starting it again")
                    restarted[slot] = time.monotonic()
                    start(slot)
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn's graceful stop, then the ledger closes
        for proc in procs.values():
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        for s, handler in old.items():
            signal.signal(s, handler)
        sock.close()
    return 1 if stopping and stopping[0] == 0 else 0
