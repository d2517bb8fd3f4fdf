"""A shortcut through FastAPI's routing for the service's hot endpoints.

Between uvicorn and an endpoint, FastAPI and Starlette add about ten layers per request
(exception middleware, an exit stack, route matching, dependency solving, the request
wrapper); for a predict that searches in well under a millisecond they were most of the
service's own CPU. This ASGI middleware sends the chosen (method, path) pairs straight to
their route's endpoint, which must take only the ``Request`` and return a ``Response``,
and maps its exceptions with the app's own exception handlers, so a request gets the
same answer either way. Everything else goes through FastAPI as usual, and the routes stay
in the OpenAPI schema.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response


class Shortcut:
    """``app.add_middleware(Shortcut, fastapi_app=app, hot={("POST", "/predict"), ...})``.

    Built when FastAPI first builds its middleware stack, so it sees every route and
    exception handler registered by then. A hot endpoint must check what its route's
    dependencies would have checked (the token, for instance) itself."""

    def __init__(self, app, fastapi_app: FastAPI, hot: set[tuple[str, str]]):
        self.app = app
        self.handlers = fastapi_app.exception_handlers
        self.routes: dict[tuple[str, str], APIRoute] = {}
        for route in fastapi_app.routes:
            if not isinstance(route, APIRoute):
                continue
            for method in route.methods or ():  # always a set on an APIRoute (typed Optional by Route)
                if (method, route.path) in hot:
                    self.routes[(method, route.path)] = route
        missing = hot - set(self.routes)
        if missing:
            raise ValueError(f"no route for {sorted(missing)}")

    async def __call__(self, scope, receive, send):
        route = self.routes.get((scope.get("method"), scope.get("path"))) if scope["type"] == "http" else None
        if route is None:
            return await self.app(scope, receive, send)
        scope["route"] = route  # as the router would record it (the metrics read it)
        request = Request(scope, receive)
        try:
            response = await route.endpoint(request)
        except Exception as exc:
            handler = next((self.handlers[t] for t in type(exc).__mro__ if t in self.handlers), None)
            if handler is None:
                raise  # the server error middleware answers 500, as for any route
            result = handler(request, exc)  # a sync handler answers at once, an async one when awaited
            response = result if isinstance(result, Response) else await result
        await response(scope, receive, send)
