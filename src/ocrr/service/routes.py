"""The HTTP routes of the service, bound to one ``ServiceState``.

Predictions, proofs and heads are open; ``/correct``, and whatever returns users' texts
(``/corrections/recent``) or costs a full scan of the file (``/verify``, which also rehashes
at most once per ``verify_every`` seconds), need the bearer token. The service fails closed:
once the file is found damaged (by ``/verify`` or the background check), it answers 503 with
the reason to ``/predict``, ``/correct``, heads and proofs, and ``/health`` is 503, until an
operator restarts it on a good file.
``/predict`` and ``/correct`` are the hot paths: ``async`` handlers that parse the body
with pydantic's JSON parser, hand the blocking part (a large search, the encoder) to the
service's own thread pools in one hop, queue corrections for the ledger's committer
thread (service/commits.py: no thread waits per correction), and answer with JSON bytes
made by pydantic-core, skipping FastAPI's per-request dependency solving, thread-pool
limiter and response re-validation (the OpenAPI schema still names both bodies).
Encoding, large searches and the fsync of a commit never block the event loop, and
corrections that arrive together share one commit (the ledger's group commit). The other
routes are plain ``def``s in FastAPI's worker threads. Every error a client can cause is a
4xx JSON ``{"detail": "<what is wrong and what to do>"}``; storage's failures are 503s
(``Routes._ocrr_error``: an integrity failure also fails the service closed).

The endpoints are methods (FastAPI takes bound methods as it takes functions); their
names are the OpenAPI operation names, and a docstring on one becomes its description.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Annotated

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.security import HTTPBearer

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger.heads import TreeHead
from ocrr.ledger.proofs import ConsistencyProof, InclusionProof, b64_nodes
from ocrr.ledger.store import LedgerStore
from ocrr.service.commits import Commits
from ocrr.service.pool import PredictPool
from ocrr.service.review_page import review_page
from ocrr.service.schemas import (
    ERROR_MEANINGS,
    ConsistencyOut,
    CorrectRequest,
    CorrectResponse,
    HealthOut,
    PredictRequest,
    PredictResponse,
    ProofOut,
    body_doc,
    error_responses,
    parse,
    to_json,
)
from ocrr.service.served import served_entries, served_inclusion_proof
from ocrr.service.state import ServiceState, failure_report
from ocrr.service.threads import one_omp_thread
from ocrr.systems.substrate.persistent import POOLED_BELOW

# A predict scanning at most this many float32s (queries x entries x dimension, ~32 MB: a
# short scan, docs/reference/measurements.md) runs on the event loop; bigger ones in a thread.
INLINE_FLOATS = 8_000_000
# A pooled search (predicts of fewer than 8 vectors, service/pool.py) runs on the event loop
# up to this many entries x dimension (~20k entries of 384: a short shortlist pass that
# releases the GIL), beyond it on a search thread: the service benchmark's by-vector p99 is
# lower on the loop (docs/reproductions/service.md, "What the defaults rest on") than
# through a thread, whose two hand-offs each wait for a busy core to be scheduled.
POOL_INLINE_FLOATS = 8_000_000
#: The routes the shortcut (service/shortcut.py) sends straight to their endpoint.
HOT = {("POST", "/predict"), ("POST", "/correct")}

# Module level: FastAPI resolves the (string) annotations of the endpoints in this module's namespace.
_bearer = HTTPBearer(auto_error=False, description="the service token (printed or set at `ocrr serve`)")


class Routes:
    """The endpoints over ``state``, and the thread pools they hand blocking work to.

    A predict of fewer than 8 vectors joins the pooled search (service/pool.py: one pass,
    through the 8-bit shortlist, for the predicts that arrive together; on a search thread
    unless the pass reads at most ``pool_inline_floats`` numbers). A bigger one whose exact
    scan reads at most ``inline_floats`` numbers (queries x entries x dimension) is answered
    on the event loop; larger ones run on ``search_threads`` threads (searches release the GIL
    in BLAS: one per core). Texts, which mostly wait for the encoder, are encoded on
    ``wait_threads`` others, so slow texts never hold up a search. Corrections are queued
    for the ledger's group commit (``Commits``); their answers come back to the loop."""

    def __init__(
        self,
        state: ServiceState,
        inline_floats: int = INLINE_FLOATS,
        search_threads: int = 2,
        wait_threads: int = 32,
        pool_inline_floats: int = POOL_INLINE_FLOATS,
    ):
        self.state, self.inline_floats = state, inline_floats
        self.search_pool = ThreadPoolExecutor(
            search_threads, thread_name_prefix="ocrr-search", initializer=one_omp_thread
        )
        self.wait_pool = ThreadPoolExecutor(wait_threads, thread_name_prefix="ocrr-wait", initializer=one_omp_thread)
        self.pool = state.pool = PredictPool(
            state.substrate, self.search_pool, pool_inline_floats, passes=search_threads
        )
        self.pool.warm()
        self.commits = Commits(state.substrate.ledger)
        one_omp_thread()  # small pooled searches run on this (the event loop's) thread
        # (size, its signed head to come) of the latest commit answered
        self._last_head: tuple[int, asyncio.Future[dict]] | None = None

    def add_to(self, app: FastAPI) -> None:
        # starlette types a handler as taking any Exception; it passes each only its own class
        app.add_exception_handler(OcrrError, self._ocrr_error)  # type: ignore[arg-type]
        app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
        app.add_api_route("/", self.page, response_class=HTMLResponse, include_in_schema=False)
        # Every status each route can answer is in its OpenAPI responses (413: the body limit,
        # limits.BodyLimit, refuses an oversized body on any route; 400: what the ledger refuses).
        app.add_api_route(
            "/health",
            self.health,
            response_model=HealthOut,
            responses={503: {"model": HealthOut, "description": ERROR_MEANINGS[503]}, **error_responses(413)},
        )
        app.add_api_route(
            "/predict",
            self.predict,
            methods=["POST"],
            response_model=PredictResponse,
            openapi_extra=body_doc(PredictRequest),
            responses=error_responses(400, 413, 422, 503),
        )
        app.add_api_route(
            "/correct",
            self.correct,
            methods=["POST"],
            response_model=CorrectResponse,
            dependencies=[Depends(_bearer)],  # the schema's auth; the endpoint checks the token itself
            openapi_extra=body_doc(CorrectRequest),
            responses=error_responses(400, 401, 413, 422, 503),
            description=(
                "Append the corrections; answered once they are on disk, with their ids, the ledger's new head "
                "signed by the log (its key alone: with witnesses, `ocrr serve --witness`, it is not cosigned; "
                "/checkpoint serves a cosigned checkpoint covering it a moment later) and their inclusion proofs."
            ),
        )
        app.add_api_route("/head", self.head, responses=error_responses(400, 413, 503))
        proof_errors = error_responses(400, 404, 413, 422, 503)
        app.add_api_route("/proof/inclusion/{index}", self.inclusion, response_model=ProofOut, responses=proof_errors)
        app.add_api_route("/proof/consistency", self.consistency, response_model=ConsistencyOut, responses=proof_errors)
        authed = error_responses(400, 401, 413)
        app.add_api_route("/verify", self.verify, dependencies=[Depends(_bearer)], responses=authed)
        app.add_api_route(
            "/corrections/recent",
            self.recent,
            dependencies=[Depends(_bearer)],
            responses=error_responses(400, 401, 413, 503),
        )
        app.add_api_route(
            "/metrics", self.metrics, response_class=PlainTextResponse, responses=error_responses(400, 413, by_ref=True)
        )

    def shutdown(self) -> None:
        self.search_pool.shutdown(wait=True)
        self.wait_pool.shutdown(wait=True)  # the corrections in flight get their commit

    # -- the hot paths ------------------------------------------------------------------
    async def predict(self, request: Request) -> Response:
        self.state.notice_damage()  # damage another worker found: looked for once a second, never waited for
        self._require_intact(fresh=False)
        req = await parse(request, PredictRequest)
        sub = self.state.substrate
        before = len(sub.ledger)  # the prefix answered from: this size, or one between it and the size after
        vectors = req.vectors if req.vectors is not None else req.vectors_b64
        if (
            vectors is None and req.texts is not None and len(req.texts) < POOLED_BELOW
        ):  # encode off the loop, then pool
            vecs = await self._off_loop(self.wait_pool, self._vectors, req)
            body = _predictions(await self.pool.explain(sub.check_queries(vecs)))
        elif vectors is None:
            body = await self._off_loop(self.wait_pool, self._predict_now, req)
        elif len(vectors) < POOLED_BELOW:  # the usual case: share a search with the predicts arriving with it
            body = _predictions(await self.pool.explain(sub.check_queries(self._vectors(req))))
        elif len(vectors) * len(sub) * (sub.ledger.dim or 0) <= self.inline_floats:
            # A small scan: here it costs less than the two thread hops (each a wake-up that a
            # busy box can delay by a scheduler tick), and its BLAS part releases the GIL anyway.
            body = self._predict_now(req)
        else:
            body = await self._off_loop(self.search_pool, self._predict_now, req)
        return Response(body, media_type="application/json", headers=self.state.prefix_headers(before))

    async def correct(self, request: Request) -> Response:
        self._require_token(request)  # here, not as a dependency: the shortcut solves none
        self._require_intact(fresh=False)  # and again, by the committer, just before the commit
        req = await parse(request, CorrectRequest)
        req.check_labels()  # before any encoding: a label the ledger would keep for good as a class apart
        if req.vectors is None and req.vectors_b64 is None:  # texts alone: encode them off the loop
            vecs = await self._off_loop(self.wait_pool, self._vectors, req)
        else:
            vecs = self._vectors(req)
        if len(req.labels) != len(vecs):
            raise OcrrError(f"got {len(req.labels)} labels for {len(vecs)} items; send one label per item")
        # PersistentSubstrate.correct's checks, then its ledger's append, queued for the group
        # commit instead of waiting in a thread: damage any worker recorded in the file is
        # looked for by the committer, once per group, so nothing is added over it.
        vecs = self.state.substrate.checked_corrections(vecs)
        ids = await self.commits.append(vecs, list(req.labels), req.texts, self._require_intact)
        return Response(await self._correct_answer(ids), media_type="application/json")

    @staticmethod
    async def _off_loop(pool: ThreadPoolExecutor, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def _vectors(self, req: PredictRequest) -> np.ndarray:
        """The request's vectors: as sent, or its texts encoded."""
        vecs = req.sent_vectors()
        if vecs is not None:
            return vecs
        if self.state.encoder is None:
            raise OcrrError("this service has no encoder: send 'vectors', or restart it with --encoder minilm")
        assert req.texts is not None  # sent_vectors returns None only when texts alone came
        return np.asarray(self.state.encoder.encode(list(req.texts)), np.float32)

    def _predict_now(self, req: PredictRequest) -> bytes:
        return _predictions(self.state.substrate.explain(self._vectors(req)))

    async def _correct_answer(self, ids: range) -> bytes:
        """The answer to a committed correction: its ids, a signed head and their proofs."""
        # one size for all; neighbours' proofs share nodes: each encoded once
        size, root, chain, found = self.state.substrate.ledger.head_with_proofs(ids, encode_all=b64_nodes)
        proofs = InclusionProof.documents(size, root, found, encoded=True)
        head = await self._commit_head(size, root, chain)
        if self.state.witnessing is not None:  # ocrr serve --witness: send the new head now
            self.state.witnessing.nudge()
        # ids and proof documents are ints and base64; a head's values are ints, strings and a bool
        return to_json({"ids": list(ids), "head": head, "proofs": proofs}, floats=False)

    def _require_token(self, request: Request, what: str = "a correction") -> None:
        if not self._has_token(request):
            raise HTTPException(
                401,
                f"{what} needs the service token: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _has_token(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.state.token.encode())

    def _require_intact(self, fresh: bool = True) -> None:
        """Fail closed: nothing is answered or signed over a file found damaged (``fresh``: by
        this worker or, as recorded in the file, by any other)."""
        if fresh:
            self.state.honour_shared_damage()
        if self.state.damage is not None:
            raise HTTPException(503, self.state.damage_reason())

    async def _commit_head(self, size: int, root: bytes, chain: bytes) -> dict:
        """The signed head at ``size``, signed once for all the corrections a group commit
        answers, not twice (head and checkpoint, Ed25519) per answer. Signing a new size
        first records it durably (an fsync: ledger/signed_state.py), so it runs off the loop."""
        if self.state.signer is None:
            return self._signed(TreeHead.now(size, root, chain))
        last = self._last_head
        if last is None or last[0] != size:
            signing = self._off_loop(self.wait_pool, self._signed, TreeHead.now(size, root, chain))
            last = self._last_head = (size, asyncio.ensure_future(signing))
        return await asyncio.shield(last[1])  # one answer cancelled does not cancel the others' head

    def _signed(self, head: TreeHead) -> dict:
        """``head``, signed if the service has a key: only if it extends every head the key
        signed before (else the service fails closed, 503)."""
        self._require_intact(fresh=False)  # no head is signed over a damaged file (its callers looked afresh)
        signer = self.state.signer
        if signer is None:
            return {**head.to_dict(), "signed": False}
        try:
            return {**signer.sign_head(head, self.state.substrate.ledger), "signed": True}
        except LedgerIntegrityError as e:
            self.state.fail({"ok": False, "size": len(self.state.substrate), "first_bad": None, "reason": str(e)})
            raise HTTPException(503, self.state.damage_reason()) from None

    # -- the ledger, as every worker committed it -----------------------------------------
    def _fresh_ledger(self) -> LedgerStore:
        """The ledger, with what every worker committed taken in."""
        led = self.state.substrate.ledger
        led.refresh()
        return led

    @contextmanager
    def _ledger_held(self) -> Iterator[LedgerStore]:
        """The ledger, taken in and read-locked: its size stays put while a proof is made."""
        self._require_intact()
        led = self._fresh_ledger()
        with led.lock.read():
            yield led

    def head(self) -> dict:
        self._require_intact()
        return self._signed(TreeHead.now(*self._fresh_ledger().head()))

    def inclusion(self, index: int, size: Annotated[int | None, Query(ge=1)] = None) -> dict:
        with self._ledger_held() as led:
            return served_inclusion_proof(led, index, size).to_dict()

    def consistency(
        self,
        size1: Annotated[int, Query(alias="from", ge=1)],
        size2: Annotated[int | None, Query(alias="to", ge=1)] = None,
    ) -> dict:
        with self._ledger_held() as led:
            n = len(led) if size2 is None else size2
            if not 0 < size1 <= n <= len(led):
                raise HTTPException(
                    404,
                    f"no consistency proof from {size1} to {n}: the ledger holds {len(led)}; "
                    "ask for 1 <= from <= to <= the ledger's size",
                )
            return ConsistencyProof.of(led.tree, size1, n).to_dict()

    def verify(self, request: Request) -> dict:
        """Rehash the whole file and check it against what the service holds. Calls within
        ``verify_every`` seconds of the last check get its result, as long as the file has not
        changed since: neither SQLite's data_version nor the identity, size and modification
        time of the file and its ``-wal`` (bytes edited by another program leave data_version
        as it was); a changed file is checked again, a database on every call. Damage makes
        every worker read-only and unhealthy (fail closed)."""
        self._require_token(request, "/verify (a full scan of the file)")
        state, led = self.state, self.state.substrate.ledger
        with state.verify_lock:  # one full check at a time; those waiting get its result
            now, version = time.monotonic(), led.data_version()  # read before: commits during the check count
            last, markers = state.last_full, _unchanged_since(led, version)
            if last is not None and now - last[0] < state.verify_every and markers is not None and last[2] == markers:
                return last[1]
            report = {**state.check_file("full"), "time": time.time()}  # damage: recorded by state.fail
            if report["ok"]:
                try:
                    led.record_verification(report)  # in the file: every worker's page shows it
                except Exception:  # noqa: BLE001 - a read-only file: the answer still stands
                    pass
            # The file as this check and its own records left it: the next change is someone else's.
            state.last_full = (now, report, _unchanged_since(led, version))
        return report

    def recent(self, request: Request) -> dict:
        """The ledger's latest entries (from the file: whichever worker committed them)."""
        self._require_token(request, "the latest corrections (users' texts)")
        self._require_intact()
        led = self._fresh_ledger()
        n = len(led)
        latest = [
            {"id": e.id, "label": e.label, "text": e.text} for e in served_entries(self.state, led, max(0, n - 20), n)
        ]
        return {"corrections": latest[::-1], "last_verify": led.last_verification()}

    async def _ocrr_error(self, request: Request, exc: OcrrError) -> JSONResponse:
        """An error the client caused is a 400 naming the fix. Storage's failures are not the
        client's: an integrity failure (storage does not hold what the ledger does) fails the
        service closed, in every worker (503 with the reason, /health 503); any other failure of
        storage (disk full, permissions, the database out of reach) is a 503 with its message."""
        if isinstance(exc, LedgerIntegrityError):
            size = len(self.state.substrate.ledger)
            self.state.fail({"ok": False, "size": size, "first_bad": exc.first_bad, "reason": exc.reason})
            return JSONResponse({"detail": self.state.damage_reason()}, status_code=503)
        return JSONResponse({"detail": str(exc)}, status_code=503 if isinstance(exc, LedgerStorageError) else 400)

    # -- the page, health and metrics ---------------------------------------------------------
    def page(self) -> HTMLResponse:
        return review_page()

    def health(self, request: Request) -> Response:
        """Minimal: ok (200) or unhealthy (503, naming the first bad entry). With the token,
        also this worker's slot and process id."""
        state = self.state
        state.honour_shared_damage()  # damage another worker found: /health says it at once
        if state.damage is None:
            try:
                self._fresh_ledger()
            except OcrrError as e:  # what another worker committed does not chain on
                state.fail(failure_report(e, len(state.substrate)))
        body: dict = {"status": "ok", "entries": len(state.substrate)}
        if state.damage is not None:
            body = {"status": "unhealthy", "first_bad": state.damage.get("first_bad"), "reason": state.damage_reason()}
        if self._has_token(request):
            body.update(worker=state.slot, workers=state.workers, pid=os.getpid())
        return JSONResponse(body, status_code=503 if state.damage is not None else 200)

    def metrics(self) -> str:
        self._fresh_ledger()  # the entries every worker committed
        return self.state.metrics_text()


def _predictions(explanations) -> bytes:
    return to_json(
        {
            "predictions": [
                {"label": e.label, "margin": e.margin, "neighbours": [n.__dict__ for n in e.neighbours]}
                for e in explanations
            ]
        }
    )


def _unchanged_since(led: LedgerStore, version: int | None) -> tuple | None:
    """What a cached /verify result is keyed on: the file's data_version and the (device,
    inode, size, modification time) of the file and of its ``-wal`` (None while it has none);
    None for a store without a data_version (a database), whose results are never reused."""
    if version is None:
        return None
    return (version, *(_identity(f"{led.path}{suffix}") for suffix in ("", "-wal")))


def _identity(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return JSONResponse({"detail": "invalid request: " + "; ".join(parts)}, status_code=422)
