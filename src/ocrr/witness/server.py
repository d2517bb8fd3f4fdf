"""Running a witness: ``serve(config)`` answers with uvicorn until SIGTERM / SIGINT."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable

import uvicorn

from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import Cosigner
from ocrr.witness.app import create_app
from ocrr.witness.config import WitnessConfig
from ocrr.witness.state import WitnessState

__all__ = ["serve"]

STOP_GRACE_S = 3  # seconds a stopping witness gives the requests in flight


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve(config: WitnessConfig, log: Callable[[str], None] = _to_stderr) -> int:
    """Listen, open the state (locked for this process), then answer until stopped; the exit status."""
    cosigner = Cosigner.load(config.key, config.name)
    sock = _listen(config.host, config.port)  # before the state: a busy port creates no state file
    try:
        state = WitnessState(config.state, cosigner, config.logs, create=config.new_state)
    except BaseException:
        sock.close()
        raise
    try:
        port = sock.getsockname()[1]
        log(f"witness {cosigner.vkey}")
        log(f"state {config.state}; witnessing {', '.join(sorted(config.logs))}")
        log(f"listening on http://{config.host}:{port}/add-checkpoint")
        uv = uvicorn.Config(
            create_app(state), log_level="warning", access_log=False, timeout_graceful_shutdown=STOP_GRACE_S
        )
        try:
            uvicorn.Server(uv).run(sockets=[sock])
        except KeyboardInterrupt:  # as uvicorn.run
            pass
        return 0
    finally:
        state.close()
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as e:
        why = os.strerror(e.errno) if e.errno else str(e)
        raise OcrrError(f"cannot listen on {host}:{port} ({why}); pick another --port or --host") from None
