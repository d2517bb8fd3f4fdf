"""Auditing with other people's tools: the service as a C2SP tlog-tiles log, its verifier key,
and inclusion proofs that carry the entry; checked by a Go program built against Debian's
golang.org/x/mod (sumdb/note, sumdb/tlog) that talks to a real `ocrr serve`."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.ledger.heads import Signer, verify_checkpoint  # noqa: E402
from ocrr.ledger.tiles import Tile, tile_bytes, tiles_of  # noqa: E402
from ocrr.ledger.verify import leaf_hash, verify_inclusion  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GO_SRC = Path(__file__).resolve().parents[1] / "go" / "ocrraudit"
GOPATH = Path("/usr/share/gocode")  # where Debian's golang-*-dev packages put Go sources
INSTALL = "apt-get install golang-go golang-golang-x-mod-dev"


def _b(s: str) -> bytes:
    return base64.b64decode(s)


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A signing server (in this process) over a seeded ledger: (url, state, signer)."""
    folder = tmp_path_factory.mktemp("audit")
    signer = Signer.generate("example.com/audit-test")
    signer.save(folder / "key.pem")
    state = open_state(folder / "ledger.db", key=folder / "key.pem", origin=signer.origin)
    seed(state)
    with running(create_app(state)) as url:
        yield url, state, signer


def test_the_checkpoint_and_verifier_key_are_served_and_verify(signed):
    url, state, signer = signed
    r = requests.get(f"{url}/verifier-key")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.strip() == signer.vkey
    r = requests.get(f"{url}/checkpoint")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.headers["cache-control"] == "no-cache"
    origin, size, root = verify_checkpoint(r.text, requests.get(f"{url}/verifier-key").text.strip())
    assert (origin, size, root) == (signer.origin, len(state.substrate), state.substrate.ledger.root())


def test_tiles_are_served_with_their_cache_headers(signed):
    url, state, _ = signed
    led = state.substrate.ledger
    size = len(led)
    (tile,) = tiles_of(size)  # 9 entries: one partial tile at level 0
    assert tile == Tile(0, 0, size)
    r = requests.get(f"{url}/{tile.path}")
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    assert r.content == tile_bytes(led.tree, size, tile) and r.headers["cache-control"] == "public, max-age=60"
    r = requests.get(f"{url}/tile/0/000.p/3")  # a narrower width, for a client at an older checkpoint
    assert r.status_code == 200 and r.content == tile_bytes(led.tree, size, Tile(0, 0, 3))
    r = requests.get(f"{url}/tile/0/000")
    assert r.status_code == 404 and f"ask for tile/0/000.p/{size}" in r.json()["detail"]
    for bad in ("tile/0/0", "tile/0/001/000", "tile/64/000", "tile/0/000.p/256", "tile/x/000"):
        r = requests.get(f"{url}/{bad}")
        assert r.status_code == 404 and "c2sp.org/tlog-tiles" in r.json()["detail"], bad


def test_full_tiles_are_immutable_and_cacheable(tmp_path):
    state = open_state(tmp_path / "ledger.db")
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((300, 64)).astype(np.float32)
    state.substrate.correct(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), [f"l{k % 3}" for k in range(300)])
    with running(create_app(state)) as url:
        r = requests.get(f"{url}/tile/0/000")
        assert r.status_code == 200 and len(r.content) == 256 * 32
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable"
        r = requests.get(f"{url}/tile/1/000.p/1")
        assert r.status_code == 200 and r.content == state.substrate.ledger.root(256)
        # Without a key: no checkpoint and no verifier key, each saying how to get one.
        for path in ("checkpoint", "verifier-key"):
            r = requests.get(f"{url}/{path}")
            assert r.status_code == 404 and "--key" in r.json()["detail"] and "keygen" in r.json()["detail"]


def test_inclusion_proofs_come_with_the_entry_the_leaf_covers(signed):
    url, state, _ = signed
    r = requests.get(f"{url}/proof/inclusion/4/entry")
    assert r.status_code == 401 and "token" in r.json()["detail"]  # it holds the user's text
    r = requests.get(f"{url}/proof/inclusion/4/entry", params={"size": 7}, headers=AUTH)
    assert r.status_code == 200, r.text
    got = r.json()
    entry = got["entry"]
    raw = _b(entry["bytes"])
    assert leaf_hash(raw) == _b(got["leaf_hash"])  # the client rebuilds the leaf itself
    verify_inclusion(4, 7, leaf_hash(raw), [_b(p) for p in got["proof"]], _b(got["root"]))
    assert _b(got["root"]) == state.substrate.ledger.root(7)
    ((i, label, text, vector, prev, _),) = state.substrate.ledger.read_entries(4, 5)
    assert (entry["id"], entry["label"], entry["text"]) == (4, label, text) and text.encode() in raw
    assert (_b(entry["vector"]), _b(entry["prev_hash"])) == (vector, prev)
    r = requests.get(f"{url}/proof/inclusion/9/entry", headers=AUTH)
    assert r.status_code == 404 and "0 <= index < size" in r.json()["detail"]
    r = requests.get(f"{url}/tile/entries/000.p/2")
    assert r.status_code == 401
    r = requests.get(f"{url}/tile/entries/000.p/2", headers=AUTH)
    assert r.status_code == 200
    n0 = int.from_bytes(r.content[:2], "big")
    assert leaf_hash(r.content[2 : 2 + n0]) == state.substrate.ledger.tree.node(0, 0)
    schema = requests.get(f"{url}/openapi.json").json()
    assert "/proof/inclusion/{index}/entry" in schema["paths"]
    assert "entry_bytes" in str(schema["components"]["schemas"]["EntryOut"])  # the encoding, documented


def test_a_damaged_service_serves_no_checkpoint_or_tiles(tmp_path):
    signer = Signer.generate("example.com/damaged")
    signer.save(tmp_path / "key.pem")
    state = open_state(tmp_path / "ledger.db", key=tmp_path / "key.pem", origin=signer.origin)
    seed(state)
    with running(create_app(state)) as url:
        state.fail({"ok": False, "first_bad": 3, "reason": "test damage"})
        for path in ("checkpoint", "tile/0/000.p/1"):
            r = requests.get(f"{url}/{path}")
            assert r.status_code == 503 and "entry 3" in r.json()["detail"], path


# -- Go ------------------------------------------------------------------------------------
def _go_env(tmp: Path) -> dict:
    """GOPATH mode over Debian's sources: offline, no module proxy, no network."""
    cache = os.environ.get("GOCACHE") or str(tmp / "gocache")
    return {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH), "GOFLAGS": "", "GOCACHE": cache}


def _build_go(tmp: Path) -> Path:
    go = shutil.which("go")
    if go is None or not (GOPATH / "src/golang.org/x/mod/sumdb/tlog/tile.go").exists():
        pytest.skip(f"Go or Debian's golang.org/x/mod sources are missing: {INSTALL}")
    out = tmp / "ocrraudit"
    done = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=GO_SRC, env=_go_env(tmp), capture_output=True, text=True
    )
    assert done.returncode == 0, f"go build failed:\n{done.stderr}"
    return out


def _serve(folder: Path, token: str) -> tuple[subprocess.Popen, str, Signer]:
    signer = Signer.generate("example.com/go-interop")
    signer.save(folder / "key.pem")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(folder / "ledger.db"), "--port", str(port)]
    cmd += ["--key", str(folder / "key.pem"), "--origin", signer.origin]
    proc = subprocess.Popen(cmd, env={**os.environ, "OCRR_TOKEN": token}, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            requests.get(f"{url}/health", timeout=1)
            return proc, url, signer
        except requests.ConnectionError:
            assert time.monotonic() < deadline, "ocrr serve did not start"
            time.sleep(0.1)


def _flip_one_byte(path: str, body: bytes) -> bytes:
    """One byte of ``body`` changed (a checkpoint: its root's first character)."""
    out = bytearray(body)
    k = out.index(b"\n", out.index(b"\n") + 1) + 1 if path == "/checkpoint" else 0
    out[k] = ord("A") if out[k] != ord("A") else ord("B")
    return bytes(out)


def _contradicting_leaf_hash(path: str, body: bytes) -> bytes:
    """An inclusion proof with its entry whose redundant ``leaf_hash`` is not the entry's leaf."""
    doc = json.loads(body)
    leaf = bytearray(_b(doc["leaf_hash"]))
    leaf[0] ^= 1
    return json.dumps({**doc, "leaf_hash": base64.b64encode(bytes(leaf)).decode("ascii")}).encode()


@contextmanager
def _tampering(url: str, path: str, alter=_flip_one_byte):
    """A proxy to ``url`` that serves what ``path`` (its query aside) answers changed by
    ``alter(path, body)``; yield its URL."""

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self):
            headers = {k: v for k, v in self.headers.items() if k.lower() == "authorization"}
            r = requests.get(url + self.path, headers=headers)
            body = r.content
            if self.path.partition("?")[0] == path and r.status_code == 200:
                body = alter(path, body)
            self.send_response(r.status_code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_go_verifies_the_checkpoint_tiles_and_proofs_of_a_real_ocrr_serve(tmp_path):
    audit = _build_go(tmp_path)
    token = secrets.token_urlsafe(32)
    proc, url, signer = _serve(tmp_path, token)
    try:
        rng = np.random.default_rng(1)
        size = 0
        for batch in (200, 200, 200, 5):  # 605 entries: full tiles, a partial one, a level-1 tile
            vecs = rng.standard_normal((batch, 32)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            body = {"vectors": vecs.tolist(), "labels": [f"l{k % 4}" for k in range(batch)]}
            body["texts"] = [f"correction {size + k} é ✓" for k in range(batch)]
            r = requests.post(f"{url}/correct", json=body, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200, r.text
            size += batch
        done = subprocess.run(
            [str(audit), url, token, "0", "255", "256", "300", "511", "600", "604"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"ok checkpoint {signer.origin} size {size}" in done.stdout
        assert "ok tiles give the tree hash" in done.stdout
        assert "ok entry 604 is in the checkpoint's tree" in done.stdout
        assert "ok the proof of entry 300 built from the tiles holds" in done.stdout
        assert "ok the tree of 256 is consistent" in done.stdout
        assert "ok entry bundle 0 holds the 256 entries" in done.stdout
        # The same program refuses a forged tile or checkpoint (served through a proxy that alters them).
        for path, reason in (
            ("/tile/0/001", "the proof built from the tiles does not hold"),
            ("/checkpoint", "invalid signature"),
        ):
            with _tampering(url, path) as forged:
                done = subprocess.run([str(audit), forged, token, "300"], capture_output=True, text=True, timeout=120)
            assert done.returncode == 1 and reason in done.stdout, (path, done.stdout + done.stderr)
        _both_reject_a_contradicting_leaf_hash(audit, url, token, tmp_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _both_reject_a_contradicting_leaf_hash(audit: Path, url: str, token: str, tmp: Path) -> None:
    """An inclusion proof whose redundant ``leaf_hash`` contradicts its entry: Go's reference
    check and ocrr's standalone verifier (against the signed checkpoint) both reject it, and
    both accept the same proof as the service sent it."""
    (tmp / "checkpoint").write_text(requests.get(f"{url}/checkpoint").text)
    trusted = ["--checkpoint", str(tmp / "checkpoint"), "--vkey", requests.get(f"{url}/verifier-key").text.strip()]
    entry = "/proof/inclusion/300/entry"
    auth = {"Authorization": f"Bearer {token}"}
    for alter, go_says, ocrr_says in (
        (lambda path, body: body, "ok entry 300 is in the checkpoint's tree", "ok"),
        (_contradicting_leaf_hash, "leaf_hash contradicts the entry's bytes", "leaf_hash contradicts the entry"),
    ):
        with _tampering(url, entry, alter) as served:
            go = subprocess.run([str(audit), served, token, "300"], capture_output=True, text=True, timeout=120)
            (tmp / "proof.json").write_bytes(requests.get(f"{served}{entry}", headers=auth).content)
        ours = subprocess.run(
            [sys.executable, "-m", "ocrr.ledger.verify", "inclusion", str(tmp / "proof.json"), *trusted],
            capture_output=True,
            text=True,
        )
        assert go_says in go.stdout and (go.returncode == 0) == (go_says.startswith("ok")), go.stdout + go.stderr
        assert ocrr_says in ours.stdout and (ours.returncode == 0) == (ocrr_says == "ok"), ours.stdout + ours.stderr
