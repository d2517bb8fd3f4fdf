"""Access and exposure: strong tokens only, a generated token in a 0600
file and never in a log, the token on whatever returns users' texts or costs a full scan,
/verify rate-limited, /health minimal, no clear-text public bind, bidi controls neutralised
on the page, vector components strictly JSON numbers."""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import sys
from importlib import resources
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import DIM, TOKEN, HashingEncoder, open_state, running, seed  # noqa: E402

from ocrr.cli.serve import _token  # noqa: E402
from ocrr.errors import OcrrError  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402
from ocrr.service.config import ServiceConfig  # noqa: E402
from ocrr.service.state import build_state  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path, check_every=0, verify_every=3600)
    seed(state)
    with running(create_app(state)) as url:
        yield url, state, path


@pytest.mark.parametrize("token", ["x", "0123456789abcdef0123", "short-token-16ch"])
def test_a_weak_token_is_refused_naming_how_to_make_one(tmp_path, token, monkeypatch):
    with pytest.raises(OcrrError, match=r"at least 128 bits needed.*secrets\.token_urlsafe\(32\)"):
        ServiceConfig(ledger=tmp_path / "l.db", token=token)
    monkeypatch.setenv("OCRR_TOKEN", token)
    with pytest.raises(OcrrError, match=r"OCRR_TOKEN is too weak.*secrets\.token_urlsafe"):
        _token(SimpleNamespace(token_file=None))
    (tmp_path / "t").write_text(token)
    with pytest.raises(OcrrError, match=r"too weak.*secrets\.token_urlsafe"):
        _token(SimpleNamespace(token_file=tmp_path / "t"))


def test_strong_tokens_are_taken(tmp_path):
    for token in (TOKEN, "ca81b08f9d71e5fdbb6e8238e977bf01", "v114fiCuFXf9DeY4O8Z9KA"):  # hex(16), urlsafe(16)
        assert ServiceConfig(ledger=tmp_path / "l.db", token=token).token == token


def test_a_generated_token_goes_to_a_0600_file_and_never_to_the_log(tmp_path):
    said: list[str] = []
    config = ServiceConfig(ledger=tmp_path / "l.db")
    state = build_state(config, encoder=HashingEncoder(), log=said.append)
    try:
        path = tmp_path / "l.db.token"
        assert config.token_path == path and path.read_text().strip() == state.token
        assert path.stat().st_mode & 0o777 == 0o600 and len(state.token) >= 43  # 256 bits
        assert any(str(path) in m for m in said) and not any(state.token in m for m in said)
    finally:
        state.close()
    server = resources.files("ocrr.service").joinpath("server.py").read_text()
    assert "state.token}" not in server  # serve() logs no token either


def test_users_texts_and_full_scans_need_the_token(served):
    url, _, _ = served
    for path in ("/corrections/recent", "/verify"):
        r = requests.get(url + path)
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
        assert requests.get(url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert requests.get(url + path, headers=AUTH).status_code == 200
    paths = requests.get(f"{url}/openapi.json").json()["paths"]
    assert paths["/verify"]["get"].get("security") and paths["/corrections/recent"]["get"].get("security")


def test_verify_is_rate_limited_and_does_not_write_on_every_call(served):
    url, _, path = served
    first = requests.get(f"{url}/verify", headers=AUTH).json()
    for _ in range(5):
        assert requests.get(f"{url}/verify", headers=AUTH).json() == first  # the last result, same time
    conn = sqlite3.connect(path)
    (written,) = conn.execute("SELECT COUNT(*) FROM verifications").fetchone()
    conn.close()
    assert written == 1


def test_health_is_minimal(served):
    url, _, _ = served
    h = requests.get(f"{url}/health").json()
    assert h == {"status": "ok", "entries": h["entries"]}  # no pid, no workers
    assert "pid" in requests.get(f"{url}/health", headers=AUTH).json()  # the operator's view


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::", "example.com"])
def test_a_public_bind_without_tls_is_refused(tmp_path, monkeypatch, host):
    # A name is looked up first (one that does not resolve is refused as such): as if online.
    resolved = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 0))]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args, **kwargs: resolved)
    with pytest.raises(OcrrError, match="--tls-cert and --tls-key, or --insecure-public"):
        ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, host=host)
    assert ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, host=host, insecure_public=True)
    tls = ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, host=host, tls_cert="c.pem", tls_key="k.pem")
    assert tls.tls
    for loopback in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, host=loopback)
    with pytest.raises(OcrrError, match="both --tls-cert and --tls-key"):
        ServiceConfig(ledger=tmp_path / "l.db", token=TOKEN, tls_cert="c.pem")


def test_serve_help_documents_tls_and_the_override():
    out = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "serve", "-h"], capture_output=True, text=True, check=True
    ).stdout
    assert "--insecure-public" in out and "--tls-cert" in out and "--tls-key" in out and "0600" in out


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the page's script")
def test_the_page_neutralises_bidi_controls():
    page = resources.files("ocrr.service").joinpath("page.html").read_text()
    start = page.index("const BIDI")
    script = page[start : page.index("function cell")]
    spoof = "card\u202eyrevil\u202c \u2066x\u2069 \u200e\u200f\u061c\u202a\u202b\u202d"
    run = script + f"\nprocess.stdout.write(JSON.stringify(neutral({json.dumps(spoof)})));"
    out = json.loads(subprocess.run(["node", "-e", run], capture_output=True, text=True, check=True).stdout)
    assert not any(c in out for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
    assert out.startswith("card<U+202E>yrevil<U+202C>")
    assert "td.textContent = neutral(text)" in page and "neutral(p.label)" in page


@pytest.mark.parametrize("bad", [True, "1.5", None, [1.0]])
def test_vector_components_are_strictly_json_numbers(served, bad):
    url, _, _ = served
    vec = [0.1] * DIM
    vec[3] = bad
    for path, extra, headers in (("/predict", {}, {}), ("/correct", {"labels": ["x"]}, AUTH)):
        r = requests.post(url + path, json={"vectors": [vec], **extra}, headers=headers)
        assert r.status_code == 422, (path, bad, r.text)
    ints = [1] + [0] * (DIM - 1)  # integers are JSON numbers too
    assert requests.post(f"{url}/predict", json={"vectors": [ints]}).status_code == 200
