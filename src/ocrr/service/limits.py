"""How much one request may carry, and the middleware that refuses a body over it."""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.responses import JSONResponse

MAX_BATCH = 256  # items per request
MAX_DIM = 4096  # components per vector
MAX_TEXT = 2000  # characters per text or label
MAX_BODY = 2_000_000  # bytes per request body
MAX_B64 = 4 * ((4 * MAX_DIM + 2) // 3)  # base64 characters of MAX_DIM float32 components


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes with a 413 JSON answer,
    by the declared length before reading, or while reading a chunked body. It wraps the
    whole app (``BodyLimit(create_app(...))``), so a refused body is answered before any route."""

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
