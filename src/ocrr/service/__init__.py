"""The substrate as a service: ``ocrr serve`` (FastAPI + uvicorn) and its review page.

``serve(ServiceConfig(ledger=...))`` runs it as ``ocrr serve`` does;
``ocrr.service.app.create_app(config_or_state)`` builds the app alone. Importing this
package needs no service extra; serving does (``pip install -e '.[service]'``).

Modules: ``config`` (the options), ``state`` (what is served, opened from a config),
``app`` (the factory), ``routes`` and ``schemas`` (the HTTP API), ``limits``, ``metrics``,
``server`` and ``supervisor`` (one process or N workers), and the hot path's helpers
``pool`` (over ``ocrr.index.shortlist``), ``shortcut``, ``encoder`` and ``threads``.
"""

from __future__ import annotations

from ocrr.errors import OcrrError
from ocrr.service.config import ServiceConfig

__all__ = ["ServiceConfig", "serve"]

_EXTRA = {"fastapi", "starlette", "pydantic", "pydantic_core", "uvicorn"}  # what `pip install -e '.[service]'` brings


def serve(config: ServiceConfig) -> int:
    """Run the service (``ocrr serve``) until SIGTERM / SIGINT; returns the exit status."""
    try:
        from ocrr.service import server  # the optional extra's modules load here, not on import
    except ImportError as e:
        if (e.name or "").split(".")[0] not in _EXTRA:
            raise
        raise OcrrError(f"ocrr serve needs the service extra ({e.name} is missing); pip install -e '.[service]'") from e
    return server.serve(config)
