"""A shortcut around FastAPI for the service's hot endpoints.

Between uvicorn and an endpoint, FastAPI and Starlette add about ten layers per request
(FastAPI's telemetry check, error middleware, body-size middleware, an exit stack, route
matching, dependency solving, the request wrapper); for a predict that searches in well
under a millisecond they were most of the service's own CPU. ``ShortcutApp`` is a FastAPI
app that hands the chosen (method, path) pairs to a ``Shortcut`` before any of those
layers run: it calls the route's endpoint, which must take only the ``Request`` and return
a ``Response``, maps its exceptions with the app's own exception handlers, and times the
request as the ``TimeRequests`` middleware does for every other route, so a request gets
the same answer and the same metrics either way. Everything else goes through FastAPI as
usual, and the routes stay in the OpenAPI schema. (FastAPI's own OpenTelemetry hooks are
skipped on the hot routes; the service's metrics are at /metrics.)
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from ocrr.service.metrics import TimeRequests


class Shortcut:
    """``Shortcut(app, hot={("POST", "/predict"), ...}, record=...)``, made once every route
    and exception handler of ``app`` is registered. A hot endpoint must check what its
    route's dependencies would have checked (the token, for instance) itself."""

    def __init__(self, app: FastAPI, hot: set[tuple[str, str]], record: Callable[[str, int, float], None]):
        self.handlers = app.exception_handlers  # the app's dict: handlers added later are seen too
        self.routes: dict[tuple[str, str], APIRoute] = {}
        for route in app.routes:
            if not isinstance(route, APIRoute):
                continue
            for method in route.methods or ():  # always a set on an APIRoute (typed Optional by Route)
                if (method, route.path) in hot:
                    self.routes[(method, route.path)] = route
        missing = hot - set(self.routes)
        if missing:
            raise ValueError(f"no route for {sorted(missing)}")
        self._timed = TimeRequests(self._answer, record)

    async def __call__(self, scope, receive, send):
        await self._timed(scope, receive, send)

    async def _answer(self, scope, receive, send):
        route = scope["route"] = self.routes[(scope["method"], scope["path"])]  # as the router records it
        request = Request(scope, receive)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            handler = next((self.handlers[t] for t in type(exc).__mro__ if t in self.handlers), None)
            if handler is None:
                raise  # the server answers 500, as for any route
            result = handler(request, exc)  # a sync handler answers at once, an async one when awaited
            response = result if isinstance(result, Response) else await result
        await response(scope, receive, send)


class ShortcutApp(FastAPI):
    """A FastAPI app whose ``shortcut`` (when set) answers its hot routes first."""

    shortcut: Shortcut | None = None

    async def __call__(self, scope, receive, send):
        shortcut = self.shortcut
        if shortcut is not None and scope["type"] == "http" and (scope["method"], scope["path"]) in shortcut.routes:
            scope["app"] = self  # as Starlette sets it (Request.url_for reads it)
            return await shortcut(scope, receive, send)
        await super().__call__(scope, receive, send)
