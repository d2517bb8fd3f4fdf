"""Running a witness: ``serve(config)`` answers with uvicorn until SIGTERM / SIGINT."""

from __future__ import annotations

import sys
from collections.abc import Callable

import uvicorn

from ocrr.ledger.cosignature import Cosigner
from ocrr.witness.app import create_app
from ocrr.witness.config import WitnessConfig
from ocrr.witness.state import WitnessState

__all__ = ["serve"]

STOP_GRACE_S = 3  # seconds a stopping witness gives the requests in flight


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve(config: WitnessConfig, log: Callable[[str], None] = _to_stderr) -> int:
    """Open the state (locked for this process), then answer until stopped; the exit status."""
    cosigner = Cosigner.load(config.key, config.name)
    state = WitnessState(config.state, cosigner, config.logs, create=config.new_state)
    try:
        log(f"witness {cosigner.vkey}")
        log(f"state {config.state}; witnessing {', '.join(sorted(config.logs))}")
        uv = uvicorn.Config(
            create_app(state),
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=STOP_GRACE_S,
        )
        server = uvicorn.Server(uv)
        log(f"listening on http://{config.host}:{config.port}/add-checkpoint")
        try:
            server.run()
        except KeyboardInterrupt:  # as uvicorn.run
            pass
        if not server.started:
            log(f"could not listen on {config.host}:{config.port}: pick another --port or --host")
            return 3
        return 0
    finally:
        state.close()
