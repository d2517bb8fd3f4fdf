"""Running the service: ``serve(config)`` answers in this process, or in ``config.workers``
worker processes under a supervisor (``supervisor.py``), until SIGTERM / SIGINT."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable

import uvicorn

from ocrr.errors import OcrrError
from ocrr.service.app import create_app
from ocrr.service.config import ServiceConfig
from ocrr.service.limits import BodyLimit
from ocrr.service.state import build_state
from ocrr.service.supervisor import bind, supervise
from ocrr.service.threads import limit_threads


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve(config: ServiceConfig, log: Callable[[str], None] = _to_stderr) -> int:
    """Open the ledger (checked fully, or from its checkpoint with ``quick_open``), seed it
    if asked, then answer until stopped. Returns the exit status."""
    # With workers, this process only checks the ledger (and seeds it): each worker loads its own encoder.
    first = config if config.workers == 1 or config.fit else dataclasses.replace(config, encoder=None)
    state = build_state(first, log=log)
    log(f"ledger {config.ledger}: {len(state.substrate)} entries, verified")
    if config.token is None:
        log(f"bearer token for /correct (set OCRR_TOKEN or --token-file to choose one): {state.token}")
    if config.workers > 1:
        state.close()
        return _serve_workers(dataclasses.replace(config, token=state.token), log)
    limit_threads()
    log(f"review page: http://{config.host}:{config.port}/   API: http://{config.host}:{config.port}/docs")
    close = state.close

    def close_and_say() -> None:  # runs at shutdown, after the requests in flight
        close()
        log(f"stopped: ledger {config.ledger} closed at {len(state.substrate)} entries")

    state.close = close_and_say
    # uvicorn stops on Ctrl-C / SIGTERM gracefully, then re-raises the signal (exit status -2 / -15).
    uvicorn.run(BodyLimit(create_app(state)), host=config.host, port=config.port, log_level="warning", access_log=False)
    return 0


def _serve_workers(config: ServiceConfig, log: Callable[[str], None]) -> int:
    """``--workers N``: the ledger was checked (and seeded) already; N worker processes now
    open it from that checkpoint and answer on one socket."""
    try:
        sock = bind(config.host, config.port, listen=False)  # claims the port; the workers listen on it
    except OSError as e:
        raise OcrrError(
            f"cannot listen on {config.host}:{config.port} ({e.strerror}); pick another --port or --host"
        ) from e
    port = sock.getsockname()[1]  # the one bound (--port 0: a free one)
    worker = dataclasses.replace(config, port=port, fit=None, data_dir=None, quick_open=True)
    log(
        f"review page: http://{config.host}:{port}/   API: http://{config.host}:{port}/docs "
        f"({config.workers} worker processes)"
    )
    status = supervise(config.workers, sock, worker_main, worker, log)
    log(f"stopped: {config.workers} workers, ledger {config.ledger} closed")
    return status


def worker_main(config: ServiceConfig, slot: int, workers: int, table) -> None:
    """One worker: open the ledger (from the supervisor's checkpoint), build the app, and
    serve on its own socket of the shared port until SIGTERM."""
    log = lambda msg: print(f"[worker {slot}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    os.setpgrp()  # a terminal's Ctrl-C reaches the supervisor only, which then stops each worker once
    state = build_state(config, log=log)
    state.slot, state.workers, state.shared = slot, workers, table
    limit_threads()
    app = BodyLimit(create_app(state))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    server.run(sockets=[bind(config.host, config.port, listen=True)])
