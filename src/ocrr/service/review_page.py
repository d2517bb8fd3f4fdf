"""The review page (``page.html``), sent with the headers that keep it to itself.

Its Content-Security-Policy lets only the page's own inline script and style run (by their
SHA-256, computed from the file, so an edit of the page needs no edit here), lets it call
the service alone, and forbids framing it (clickjacking). An injected ``<script>``, inline
``style="…"`` or ``onclick="…"`` would not run: the page must keep to one ``<script>`` and
one ``<style>`` block, written exactly so, with no attributes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from importlib import resources

from fastapi.responses import HTMLResponse


@functools.cache
def _page() -> tuple[str, dict[str, str]]:
    html = resources.files("ocrr.service").joinpath("page.html").read_text(encoding="utf-8")
    scripts = " ".join(_sha256(block) for block in re.findall(r"<script>(.*?)</script>", html, re.S))
    styles = " ".join(_sha256(block) for block in re.findall(r"<style>(.*?)</style>", html, re.S))
    policy = (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Security-Policy": policy,
        "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return html, headers


def review_page() -> HTMLResponse:
    html, headers = _page()
    return HTMLResponse(html, headers=headers)


def _sha256(block: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(block.encode("utf-8")).digest()).decode("ascii") + "'"
