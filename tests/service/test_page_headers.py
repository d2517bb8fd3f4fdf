"""The review page cannot be framed (clickjacking: a hidden frame over another site's
button), runs only its own script and style (a Content-Security-Policy with their hashes,
no 'unsafe-inline'), is never sniffed as another type, and sends no referrer."""

from __future__ import annotations

import base64
import hashlib
import re

import requests
from service_helpers import open_state, running

from ocrr.service.app import create_app


def _policy(header: str) -> dict[str, list[str]]:
    directives = (d.split() for d in header.split(";") if d.strip())
    return {name: sources for name, *sources in directives}


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_page_sends_a_strict_policy_that_lets_its_own_script_and_style_run(tmp_path):
    with running(create_app(open_state(tmp_path / "l.db"))) as url:
        r = requests.get(url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    policy = _policy(r.headers["content-security-policy"])
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["default-src"] == ["'none'"]
    assert policy["connect-src"] == ["'self'"]  # the page's fetch() calls go to the service only
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'none'"]
    scripts = re.findall(r"<script>(.*?)</script>", r.text, re.S)
    styles = re.findall(r"<style>(.*?)</style>", r.text, re.S)
    assert scripts and styles
    assert policy["script-src"] == [_sha256(s) for s in scripts]
    assert policy["style-src"] == [_sha256(s) for s in styles]
    assert "'unsafe-inline'" not in r.headers["content-security-policy"]
    # Inline style attributes and event handlers would need 'unsafe-inline': the page has none.
    assert not re.search(r"<[^>]*\s(style|on[a-z]+)\s*=", r.text)
