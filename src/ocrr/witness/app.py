"""The witness's HTTP interface (c2sp.org/tlog-witness): ``POST /add-checkpoint``.

Answers: 200 with the cosignature line; 400 for a malformed request, 403 for a checkpoint not
signed by the log's trusted key, 404 for an unknown log, 409 (body: the size last cosigned,
``text/x.tlog.size``) for a stale ``old`` or a second root at the held size, 413 for a body
over the limit, 422 for a consistency proof that does not verify."""

from __future__ import annotations

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import Response

from ocrr.witness.request import MAX_BODY, BadRequest, parse_add_checkpoint
from ocrr.witness.state import Refused, WitnessState

__all__ = ["create_app"]


def _text(body: str, status: int = 200, content_type: str = "text/plain; charset=utf-8") -> Response:
    """``body`` with exactly ``content_type`` (Starlette would add a charset to text/x.tlog.size)."""
    return Response(body.encode(), status_code=status, headers={"content-type": content_type})


async def _read_body(request: Request) -> bytes:
    """The request body, or Refused(413) as soon as it is over MAX_BODY (declared or sent)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise Refused(413, f"request body over {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refused(413, f"request body over {MAX_BODY} bytes")
    return bytes(body)


def create_app(state: WitnessState) -> FastAPI:
    app = FastAPI(title="ocrr witness", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(Refused)
    async def refused(_request: Request, err: Refused) -> Response:
        return _text(err.body, err.status, err.content_type)

    @app.post("/add-checkpoint")
    async def add_checkpoint(request: Request) -> Response:
        try:
            parsed = parse_add_checkpoint(await _read_body(request))
        except BadRequest as e:
            raise Refused(400, str(e)) from None
        # The check, the fsynced commit and the signature run off the event loop, one at a time.
        line = await anyio.to_thread.run_sync(state.add_checkpoint, parsed)
        return _text(line)

    @app.get("/")
    async def identity() -> Response:
        """The witness's verifier key, for logs and clients to configure (not part of the spec)."""
        return _text(state.cosigner.vkey + "\n")

    return app
