"""``/docs`` (Swagger UI) works offline: its script and style come from the service, from
the assets the swagger-ui-bundle-v2 package ships, never from a CDN."""

from __future__ import annotations

import re

import requests
from service_helpers import open_state, running

from ocrr.service.app import create_app


def test_docs_reference_no_external_url_and_their_assets_load(tmp_path):
    with running(create_app(open_state(tmp_path / "l.db"))) as base:
        page = requests.get(base + "/docs", timeout=10)
        assert page.status_code == 200
        urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
        assert not [u for u in urls if "//" in u], urls  # nothing from another host
        assets = [u for u in urls if u != "/openapi.json"]
        assert {u.rsplit(".", 1)[-1] for u in assets} >= {"js", "css"}, urls
        for url in assets:
            asset = requests.get(base + url, timeout=10)
            assert asset.status_code == 200 and len(asset.content) > 100, url
        js = next(u for u in assets if u.endswith("swagger-ui-bundle.js"))
        assert (
            requests.get(base + js, timeout=10)
            .headers["content-type"]
            .startswith(("text/javascript", "application/javascript"))
        )
        assert requests.get(base + "/openapi.json", timeout=10).json()["openapi"].startswith("3.")
        assert requests.get(base + "/redoc", timeout=10).status_code == 404  # ReDoc would load from a CDN: not served
