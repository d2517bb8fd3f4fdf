"""``/docs``: Swagger UI served from the assets the swagger-ui-bundle-v2 package ships.

FastAPI's own ``/docs`` loads Swagger UI's script and style from a CDN, so on a machine
without internet access (or behind a proxy that blocks the CDN) the page is blank; its
``/redoc`` does the same and is not served. Without the package (an install older than the
service extra that brings it), ``/docs`` says so and points at ``/openapi.json``.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"  # where the package's files are served


def add_docs(app: FastAPI) -> None:
    """Add ``/docs`` to ``app`` (made with ``docs_url=None, redoc_url=None``)."""
    assets = _swagger_ui_assets()
    if assets is None:

        def no_docs() -> PlainTextResponse:
            return PlainTextResponse(
                "the API page needs Swagger UI 5 from the swagger-ui-bundle-v2 package: pip install "
                "'ocrr[service]' again. The API's schema is at /openapi.json",
                status_code=404,
            )

        app.add_api_route("/docs", no_docs, include_in_schema=False)
        return

    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            swagger_ui_parameters={"validatorUrl": None},  # Swagger UI would send the schema to its online validator
        )

    app.add_api_route("/docs", docs, include_in_schema=False)
    app.mount(ASSETS, StaticFiles(directory=assets), name="docs-assets")


def _swagger_ui_assets() -> Path | None:
    """The folder of Swagger UI's files, if a version that reads OpenAPI 3.1 (5 or later) is installed."""
    try:
        from swagger_ui_bundle import swagger_ui_path  # swagger-ui-bundle-v2; v1 has the same module name
    except ImportError:
        return None
    version = re.fullmatch(r"swagger-ui-(\d+)\..*", swagger_ui_path.name)
    if version is None or int(version.group(1)) < 5:  # v1's Swagger UI 4 cannot show FastAPI's OpenAPI 3.1
        return None
    return Path(str(swagger_ui_path))
