"""The app factory: ``create_app(config_or_state)`` -> the FastAPI app of the service.

The routes are in ``routes.py``, the bodies in ``schemas.py``, what is served in
``state.py``. Serve the app wrapped in ``limits.BodyLimit`` (``server.py`` does).
"""

from __future__ import annotations

import gc
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

from ocrr.ledger.column_rehash import chain_columns
from ocrr.service.api_docs import add_docs
from ocrr.service.audit_routes import AuditRoutes
from ocrr.service.config import ServiceConfig
from ocrr.service.metrics import MAX_ROUTES, Counters, TimeRequests
from ocrr.service.rehash_trusted import RehashTrusted
from ocrr.service.routes import HOT, INLINE_FLOATS, POOL_INLINE_FLOATS, Routes
from ocrr.service.shortcut import Shortcut, ShortcutApp
from ocrr.service.state import ServiceState, build_state


def create_app(
    source: ServiceConfig | ServiceState,
    *,
    inline_floats: int = INLINE_FLOATS,
    search_threads: int = 2,
    wait_threads: int = 32,
    shortcut: bool = True,
    pool_inline_floats: int = POOL_INLINE_FLOATS,
    freeze_heap: bool = False,
) -> FastAPI:
    """The app over ``source``: a state already open, or a config to open one from
    (``build_state``). The app closes the state when it shuts down.

    The thread pools and the size thresholds that decide where a search runs are explained
    in ``routes.Routes``. ``shortcut``: answer /predict and /correct before FastAPI's own layers
    (service/shortcut.py). ``freeze_heap``: at start-up, move every object alive to the
    collector's permanent generation (``gc.freeze``); for a process that only serves, as
    ``ocrr serve``'s are, not for one that goes on to do other work."""
    state = source if isinstance(source, ServiceState) else build_state(source)
    routes = Routes(
        state,
        inline_floats=inline_floats,
        search_threads=search_threads,
        wait_threads=wait_threads,
        pool_inline_floats=pool_inline_floats,
    )

    stop = threading.Event()

    def check_in_background() -> None:
        """Every ``check_every`` seconds, check what is new in the file since the last good
        check (and that checkpoint): damage makes the service read-only (fail closed)."""
        while not stop.wait(state.check_every):
            if state.damage is not None:
                return
            try:
                state.check_file("checkpoint", rest=stop.wait)
            except Exception as e:  # noqa: BLE001 - a file that cannot even be read is damage too
                state.fail({"ok": False, "first_bad": None, "reason": f"the file could not be checked ({e})"})

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if state.check_every > 0:
            threading.Thread(target=check_in_background, name="ocrr-check", daemon=True).start()
        rehashing, held = None, state.substrate.system.ledger_
        if state.trusted and held is not None:  # what the quick open did not rehash, rehashed while serving
            columns = chain_columns(held)
            rehashing = RehashTrusted(
                columns, state.trusted, state.log, state.found_by_rehash, after=state.rehash_after
            ).start()
        if state.slot == 0:  # one process per service sends checkpoints to the witnesses (--witness)
            state.start_witnessing()
        if freeze_heap:
            # What start-up loaded (libraries, the app, the ledger's state) lives as long as
            # the process; left to the collector, each full collection walks all of it again,
            # a pause that every request in flight waits out (docs/service.md, "How a request runs").
            gc.collect()
            gc.freeze()
        yield
        stop.set()
        if rehashing is not None:
            rehashing.stop()
        if state.witnessing is not None:
            state.witnessing.stop()
        routes.shutdown()
        # Waits for the commit in flight (acknowledged corrections are on disk already).
        (state.close or state.substrate.close)()

    app = ShortcutApp(
        title="ocrr substrate",
        version="1",
        lifespan=lifespan,
        description="Predict with a persistent substrate, correct it, and prove what its ledger holds.",
        docs_url=None,  # FastAPI's loads Swagger UI from a CDN: api_docs serves it from the package
        redoc_url=None,
    )
    add_docs(app)
    routes.add_to(app)
    AuditRoutes(state).add_to(app)  # /checkpoint, /tile/..., /verifier-key, proofs with entries
    paths = [r.path for r in app.routes if isinstance(r, Route)]  # the HTTP routes (APIRoute is one too)
    state.counters = Counters(paths, state.workers, state.slot, state.shared, routes=MAX_ROUTES)
    app.add_middleware(TimeRequests, record=state.record_request)
    if shortcut:
        app.shortcut = Shortcut(app, HOT, state.record_request)
    return app
