"""The HTTP service over a persistent substrate (FastAPI).

Reads (``/predict``, proofs, heads) are open; ``/correct`` needs the bearer token.
``/predict`` and ``/correct`` are the hot paths: ``async`` handlers that parse the body
with pydantic's JSON parser, hand the blocking part (search, encoder, commit) to the
service's own thread pools in one hop, and answer with JSON bytes made by pydantic-core,
skipping FastAPI's per-request dependency solving, thread-pool limiter and response
re-validation (the OpenAPI schema still names both bodies). Encoding, search and the
fsync of a commit never block the event loop, and corrections that arrive together share
one commit (the ledger's group commit). The other routes are plain ``def``s in FastAPI's
worker threads. Every error a client can cause is a 4xx JSON ``{"detail": "<what is
wrong and what to do>"}``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_json

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, TreeHead
from ocrr.service.counters import BUCKETS, MAX_ROUTES, Counters
from ocrr.service.pool import PredictPool
from ocrr.service.shortcut import Shortcut
from ocrr.systems.persistent import POOLED_BELOW, PersistentSubstrate

MAX_BATCH = 256  # items per request
MAX_DIM = 4096  # components per vector
MAX_TEXT = 2000  # characters per text or label
MAX_BODY = 2_000_000  # bytes per request body
MAX_B64 = 4 * ((4 * MAX_DIM + 2) // 3)  # base64 characters of MAX_DIM float32 components
_F32_MAX = float(np.finfo(np.float32).max)
# A predict scanning at most this many float32s (queries x entries x dimension, ~32 MB: about
# 2 ms on one core of the 2-core box) runs on the event loop; bigger ones in a thread.
INLINE_FLOATS = 8_000_000
# A pooled search (predicts of fewer than 8 vectors, service/pool.py) runs on the event loop
# up to this many entries x dimension (~20k entries of 384: a float16 pass of 0.5-1 ms that
# releases the GIL), beyond it on a search thread. Measured on the 2-core box (8 clients, the
# issue's mix, 4 runs each): by-vector p99 8.0-8.6 ms on the loop, 10.7-11.4 ms through a
# thread, whose two hand-offs each wait for a busy core to be scheduled.
POOL_INLINE_FLOATS = 8_000_000
_F4LE = np.dtype("<f4")


def _one_omp_thread() -> None:
    """One OpenMP thread for the FAISS calls of this thread (the shortlist's scan). OpenMP's
    thread count is a per-thread setting that new threads take from the environment, and
    FAISS's wheel brings its own OpenMP runtime that threadpoolctl does not reach: left at
    one thread per core, its idle workers spin after every search (measured: twice the
    server's CPU per request at one client), taking the core the other requests need. The
    service's parallelism is its own threads, one search per core."""
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(1)


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


@dataclass
class ServiceState:
    """What the app serves: the substrate, an optional encoder and signer, the token."""

    substrate: PersistentSubstrate
    token: str
    encoder: Any = None  # has .encode(list[str]) -> (n, d) float32; None: vectors only
    signer: Signer | None = None
    started: float = field(default_factory=time.time)
    close: Any = None  # called on shutdown (default: close the substrate)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: Any = None  # the app's PredictPool (for /metrics)
    # ocrr serve --workers N: this process's slot, N, and the counter table the workers share
    # (service/workers.py); with one process, a private table.
    slot: int = 0
    workers: int = 1
    shared: Any = None
    counters: Counters | None = None  # made by create_app, which knows the routes


# -- request and response bodies ------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Vector = Annotated[list[float], Field(min_length=1, max_length=MAX_DIM)]
PackedVector = Annotated[
    str, Field(min_length=1, max_length=MAX_B64, description="base64 of the vector's little-endian float32 bytes")
]


class PredictRequest(_Strict):
    """Exactly one of ``texts`` (needs an encoder), ``vectors`` (lists of numbers) or
    ``vectors_b64`` (each vector as base64 of its little-endian float32 bytes: a quarter of
    the JSON's size, and no number parsing on either side)."""

    texts: Annotated[list[Text], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    vectors: Annotated[list[Vector], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    vectors_b64: Annotated[list[PackedVector], Field(min_length=1, max_length=MAX_BATCH)] | None = None


class CorrectRequest(PredictRequest):
    """The items (``texts``, or vectors in either form, or both: vectors are then stored
    with their texts) and one label each."""

    labels: Annotated[list[Text], Field(min_length=1, max_length=MAX_BATCH)]


class NeighbourOut(BaseModel):
    id: int
    label: str
    similarity: float
    votes: bool


class PredictionOut(BaseModel):
    label: str | None
    neighbours: list[NeighbourOut]
    margin: float | None


class PredictResponse(BaseModel):
    predictions: list[PredictionOut]


class ProofOut(BaseModel):
    index: int
    size: int
    root: str
    leaf_hash: str
    proof: list[str]


class CorrectResponse(BaseModel):
    ids: list[int]
    head: dict
    proofs: list[ProofOut]


class ConsistencyOut(BaseModel):
    size1: int = Field(alias="from")
    size2: int = Field(alias="to")
    root_from: str
    root_to: str
    proof: list[str]


async def _parse(request: Request, model: type[BaseModel]) -> BaseModel:
    """The request body parsed by pydantic's own JSON parser: several times cheaper than
    FastAPI's json.loads-then-validate (a 384-float vector: ~20 µs, not ~300). Errors go to
    the same 422 handler as FastAPI's own."""
    body = await request.body()
    try:
        return model.model_validate_json(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False), body=body) from None


def _unpack(packed: list[str]) -> np.ndarray:
    """``vectors_b64`` -> (n, d) float64 (checked like ``vectors`` afterwards)."""
    try:
        raws = [base64.b64decode(v, validate=True) for v in packed]
    except (binascii.Error, ValueError):
        raise OcrrError(
            "vectors_b64 holds a string that is not base64; send base64 (RFC 4648, with padding) "
            "of each vector's little-endian float32 bytes"
        ) from None
    if len({len(r) for r in raws}) != 1 or not raws[0] or len(raws[0]) % 4:
        raise OcrrError(
            "vectors_b64: every vector must decode to the same whole number of float32 values "
            "(4 bytes each), at least one"
        )
    return np.frombuffer(b"".join(raws), _F4LE).reshape(len(raws), -1).astype(np.float64)


def _body_doc(model: type[BaseModel]) -> dict:
    """The OpenAPI request body of an endpoint that parses its body with ``_json_body``."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


# -- the app --------------------------------------------------------------------------
# Module level: FastAPI resolves the (string) annotations of handlers in this module's namespace.
_bearer = HTTPBearer(auto_error=False, description="the service token (printed or set at `ocrr serve`)")


def create_app(
    state: ServiceState,
    inline_floats: int = INLINE_FLOATS,
    search_threads: int = 2,
    wait_threads: int = 32,
    shortcut: bool = True,
    pool_inline_floats: int = POOL_INLINE_FLOATS,
) -> FastAPI:
    """The app. A predict of fewer than 8 vectors joins the pooled search
    (service/pool.py: one pass, through the float16 shortlist, for the predicts that arrive
    together; on a search thread unless the pass reads at most ``pool_inline_floats``
    numbers). A bigger one whose exact scan reads at most ``inline_floats`` numbers
    (queries x entries x dimension) is answered on the event loop; larger ones run on
    ``search_threads`` threads (searches release the GIL in BLAS: one per core).
    Predicts by text and corrections, which mostly wait (for the encoder, for the group
    commit's fsync), run on ``wait_threads`` others, so slow texts never hold up a search.
    ``shortcut``: route /predict and /correct around FastAPI's routing (service/shortcut.py)."""
    search_pool = ThreadPoolExecutor(search_threads, thread_name_prefix="ocrr-search", initializer=_one_omp_thread)
    wait_pool = ThreadPoolExecutor(wait_threads, thread_name_prefix="ocrr-wait", initializer=_one_omp_thread)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        search_pool.shutdown(wait=True)
        wait_pool.shutdown(wait=True)  # the corrections in flight get their commit
        # Waits for the commit in flight (acknowledged corrections are on disk already).
        (state.close or state.substrate.close)()

    async def off_loop(pool: ThreadPoolExecutor, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    app = FastAPI(
        title="ocrr substrate",
        version="1",
        lifespan=lifespan,
        description="Predict with a persistent substrate, correct it, and prove what its ledger holds.",
    )

    def require_token(request: Request) -> None:
        # In the endpoint, not a dependency: the shortcut (service/shortcut.py) solves none.
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), state.token.encode()):
            raise HTTPException(
                401,
                "a correction needs the service token: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @app.exception_handler(OcrrError)
    async def _ocrr_error(request: Request, exc: OcrrError):
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return JSONResponse({"detail": "invalid request: " + "; ".join(parts)}, status_code=422)

    def vectors_of(req: PredictRequest) -> tuple[np.ndarray, list | None]:
        if req.vectors is None and req.vectors_b64 is None and req.texts is None:
            raise OcrrError(
                "send 'texts' (a list of strings), 'vectors' (a list of float lists) or "
                "'vectors_b64' (a list of base64 float32 vectors)"
            )
        if req.vectors is not None and req.vectors_b64 is not None:
            raise OcrrError("send 'vectors' or 'vectors_b64', not both")
        if req.vectors is not None or req.vectors_b64 is not None:
            if req.vectors_b64 is not None:
                vecs = _unpack(req.vectors_b64)
            elif len({len(v) for v in req.vectors}) != 1:
                raise OcrrError("vectors have different lengths; every vector needs the ledger's dimension")
            else:
                vecs = np.asarray(req.vectors, np.float64)  # float32 only once in range (np.errstate is slow)
            if req.texts is not None and len(req.texts) != len(vecs):
                raise OcrrError(f"got {len(req.texts)} texts but {len(vecs)} vectors; send one per item")
            if not (np.isfinite(vecs).all() and np.abs(vecs).max() <= _F32_MAX):
                raise OcrrError(
                    "a vector contains NaN, infinity or a value beyond float32's range (3.4e38); "
                    "send finite float32 numbers"
                )
            return vecs.astype(np.float32), req.texts
        if state.encoder is None:
            raise OcrrError("this service has no encoder: send 'vectors', or restart it with --encoder minilm")
        return np.asarray(state.encoder.encode(list(req.texts)), np.float32), req.texts

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> str:
        return resources.files("ocrr.service").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/health")
    def health() -> dict:
        state.substrate.ledger.refresh()
        return {
            "status": "ok",
            "entries": len(state.substrate),
            "encoder": state.encoder is not None,
            "signed": state.signer is not None,
            "worker": state.slot,
            "workers": state.workers,
            "pid": os.getpid(),
        }

    def answer(explanations) -> bytes:
        return to_json(
            {
                "predictions": [
                    {"label": e.label, "margin": e.margin, "neighbours": [n.__dict__ for n in e.neighbours]}
                    for e in explanations
                ]
            }
        )

    def predict_now(req: PredictRequest) -> bytes:
        vecs, _ = vectors_of(req)
        return answer(state.substrate.explain(vecs))

    pool = state.pool = PredictPool(state.substrate, search_pool, pool_inline_floats, passes=search_threads)
    pool.warm()
    _one_omp_thread()  # small pooled searches run on this (the event loop's) thread

    @app.post("/predict", response_model=PredictResponse, openapi_extra=_body_doc(PredictRequest))
    async def predict(request: Request) -> Response:
        req = await _parse(request, PredictRequest)
        vectors = req.vectors if req.vectors is not None else req.vectors_b64
        if (
            vectors is None and req.texts is not None and len(req.texts) < POOLED_BELOW
        ):  # encode off the loop, then pool
            vecs, _ = await off_loop(wait_pool, vectors_of, req)
            body = answer(await pool.explain(state.substrate.check_queries(vecs)))
        elif vectors is None:
            body = await off_loop(wait_pool, predict_now, req)
        elif len(vectors) < POOLED_BELOW:  # the usual case: share a search with the predicts arriving with it
            body = answer(await pool.explain(state.substrate.check_queries(vectors_of(req)[0])))
        elif len(vectors) * len(state.substrate) * (state.substrate.ledger.dim or 0) <= inline_floats:
            # A small scan: here it costs less than the two thread hops (each a wake-up that a
            # busy box can delay by a scheduler tick), and its BLAS part releases the GIL anyway.
            body = predict_now(req)
        else:
            body = await off_loop(search_pool, predict_now, req)
        return Response(body, media_type="application/json")

    def correct_now(req: CorrectRequest) -> bytes:
        vecs, texts = vectors_of(req)
        if len(req.labels) != len(vecs):
            raise OcrrError(f"got {len(req.labels)} labels for {len(vecs)} items; send one label per item")
        ids = state.substrate.correct(vecs, list(req.labels), texts)
        size, root, chain, found = state.substrate.ledger.head_with_proofs(ids)  # one size for all
        proofs = [
            {"index": i, "size": size, "root": _b64(root), "leaf_hash": _b64(leaf), "proof": [_b64(p) for p in proof]}
            for i, leaf, proof in found
        ]
        return to_json({"ids": list(ids), "head": _commit_head(size, root, chain), "proofs": proofs})

    @app.post(
        "/correct",
        response_model=CorrectResponse,
        dependencies=[Depends(_bearer)],  # the schema's auth
        openapi_extra=_body_doc(CorrectRequest),
    )
    async def correct(request: Request) -> Response:
        require_token(request)
        req = await _parse(request, CorrectRequest)
        return Response(await off_loop(wait_pool, correct_now, req), media_type="application/json")

    last_head: list = [None]  # (size, signed head) of the latest commit answered

    def _commit_head(size: int, root: bytes, chain: bytes) -> dict:
        """The signed head at ``size``, signed once for all the corrections a group commit
        answers, not twice (head and checkpoint, Ed25519) per answer."""
        got = last_head[0]
        if got is None or got[0] != size:
            got = last_head[0] = (size, _signed(TreeHead.now(size, root, chain)))
        return got[1]

    def _signed(head: TreeHead) -> dict:
        if state.signer is None:
            return {**head.to_dict(), "signed": False}
        return {**state.signer.sign_head(head), "signed": True}

    @app.get("/head")
    def head() -> dict:
        state.substrate.ledger.refresh()  # what every worker committed
        return _signed(TreeHead.now(*state.substrate.ledger.head()))

    @app.get("/proof/inclusion/{index}", response_model=ProofOut)
    def inclusion(index: int, size: Annotated[int | None, Query(ge=1)] = None) -> dict:
        led = state.substrate.ledger
        led.refresh()
        with led.lock.read():
            n = len(led) if size is None else size
            if not 0 <= index < n <= len(led):
                raise HTTPException(
                    404,
                    f"no entry {index} in a log of size {n} (the ledger holds {len(led)}); "
                    "ask for 0 <= index < size <= the ledger's size",
                )
            return {
                "index": index,
                "size": n,
                "root": _b64(led.root(n)),
                "leaf_hash": _b64(led.tree.node(0, index)),
                "proof": [_b64(p) for p in led.inclusion_proof(index, n)],
            }

    @app.get("/proof/consistency", response_model=ConsistencyOut)
    def consistency(
        size1: Annotated[int, Query(alias="from", ge=1)], size2: Annotated[int | None, Query(alias="to", ge=1)] = None
    ) -> dict:
        led = state.substrate.ledger
        led.refresh()
        with led.lock.read():
            n = len(led) if size2 is None else size2
            if not 0 < size1 <= n <= len(led):
                raise HTTPException(
                    404,
                    f"no consistency proof from {size1} to {n}: the ledger holds {len(led)}; "
                    "ask for 1 <= from <= to <= the ledger's size",
                )
            return {
                "from": size1,
                "to": n,
                "root_from": _b64(led.root(size1)),
                "root_to": _b64(led.root(n)),
                "proof": [_b64(p) for p in led.consistency_proof(size1, n)],
            }

    @app.get("/verify")
    def verify() -> dict:
        report = {**state.substrate.verify().to_dict(), "time": time.time()}
        state.substrate.ledger.record_verification(report)  # in the file: every worker's page shows it
        return report

    @app.get("/corrections/recent")
    def recent() -> dict:
        """The ledger's latest entries (from the file: whichever worker committed them)."""
        led = state.substrate.ledger
        led.refresh()
        n = len(led)
        latest = [{"id": i, "label": label, "text": text} for i, label, text, *_ in led.read_entries(max(0, n - 20), n)]
        return {"corrections": latest[::-1], "last_verify": led.last_verification()}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        state.substrate.ledger.refresh()
        return _prometheus(state)

    state.counters = Counters(
        [r.path for r in app.routes if hasattr(r, "methods")],
        state.workers,
        state.slot,
        state.shared,
        routes=MAX_ROUTES,
    )

    if shortcut:
        app.add_middleware(Shortcut, fastapi_app=app, hot={("POST", "/predict"), ("POST", "/correct")})
    app.add_middleware(_Measure, state=state)
    return app


class _Measure:
    """ASGI middleware counting requests and their time per route (for /metrics); plain
    ASGI because Starlette's BaseHTTPMiddleware costs a task per request."""

    def __init__(self, app, state: ServiceState):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = getattr(scope.get("route"), "path", "other")  # the router records the matched route
            state = self.state
            pool, led = state.pool, state.substrate.ledger
            with state.lock:
                state.counters.request(path, status, time.perf_counter() - t0)
                state.counters.publish(
                    commits=led.commits,
                    searches=pool.passes,
                    pooled=pool.requests,
                    full_scans=pool.shortlist.fallbacks if pool.shortlist else 0,
                    followed=led.followed,
                )


def _prometheus(state: ServiceState) -> str:
    """Prometheus text exposition format (version 0.0.4), summed over the workers."""
    with state.lock:
        state.counters.publish(commits=state.substrate.ledger.commits)  # this worker's, current
        got = state.counters.totals()
    lines = ["# HELP ocrr_requests_total HTTP requests by route and status.", "# TYPE ocrr_requests_total counter"]
    for (path, status), n in sorted(got["requests"].items(), key=str):
        lines.append(f'ocrr_requests_total{{path="{path}",status="{status}"}} {n}')
    lines += [
        "# HELP ocrr_request_seconds Time spent answering requests, by route (from the request's "
        "arrival in the app to its last byte handed to the server).",
        "# TYPE ocrr_request_seconds histogram",
    ]
    for path, (total, n) in sorted(got["seconds"].items()):
        for bound, count in zip(BUCKETS, got["buckets"][path]):
            lines.append(f'ocrr_request_seconds_bucket{{path="{path}",le="{bound}"}} {count}')
        lines.append(f'ocrr_request_seconds_bucket{{path="{path}",le="+Inf"}} {n}')
        lines.append(f'ocrr_request_seconds_sum{{path="{path}"}} {total:.6f}')
        lines.append(f'ocrr_request_seconds_count{{path="{path}"}} {n}')
    lines += [
        "# HELP ocrr_ledger_entries Entries committed to the ledger.",
        "# TYPE ocrr_ledger_entries gauge",
        f"ocrr_ledger_entries {len(state.substrate.ledger)}",
        "# HELP ocrr_ledger_commits_total Transactions committed since start (group commits), all workers.",
        "# TYPE ocrr_ledger_commits_total counter",
        f"ocrr_ledger_commits_total {got['commits']}",
        "# HELP ocrr_predict_searches_total Searches run for pooled predicts by vector.",
        "# TYPE ocrr_predict_searches_total counter",
        f"ocrr_predict_searches_total {got['searches']}",
        "# HELP ocrr_predict_pooled_total Predicts by vector answered by those searches.",
        "# TYPE ocrr_predict_pooled_total counter",
        f"ocrr_predict_pooled_total {got['pooled']}",
        "# HELP ocrr_predict_full_scans_total Pooled queries the float16 shortlist could not settle (scanned in full).",
        "# TYPE ocrr_predict_full_scans_total counter",
        f"ocrr_predict_full_scans_total {got['full_scans']}",
        "# HELP ocrr_workers Processes answering requests (ocrr serve --workers).",
        "# TYPE ocrr_workers gauge",
        f"ocrr_workers {state.workers}",
        "# HELP ocrr_uptime_seconds Seconds since the service started.",
        "# TYPE ocrr_uptime_seconds gauge",
        f"ocrr_uptime_seconds {time.time() - state.started:.3f}",
    ]
    return "\n".join(lines) + "\n"


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with a 413 JSON answer,
    by the declared length before reading, or while reading a chunked body."""

    def __init__(self, app, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    def _detail(self) -> str:
        return f"request body over {self.limit} bytes; send at most {MAX_BATCH} items per request"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse({"detail": self._detail()}, status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:  # FastAPI passes an HTTPException raised here to its handler
                    raise HTTPException(413, self._detail())
            return message

        await self.app(scope, counted, send)
