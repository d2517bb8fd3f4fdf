"""Shared by the client tests: real `ocrr serve` processes on loopback, and a proxy that rewrites
what passes through it (a service, or a path to it, that lies)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import requests

from ocrr.ledger.heads import Signer

TOKEN = secrets.token_urlsafe(32)  # a real random token: the service refuses weak ones
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DIM = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Log:
    """One signing key and origin, served from whichever ledger file, always at one URL."""

    def __init__(self, folder: Path, origin: str = "example.com/client-test"):
        self.folder, self.signer = folder, Signer.generate(origin)
        self.signer.save(folder / "key.pem")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def vkey(self) -> str:
        return self.signer.vkey

    @contextmanager
    def serving(self, ledger: Path):
        """`ocrr serve` on ``ledger`` at this log's URL, stopped (SIGTERM) on the way out.

        Each ledger file gets its own record of signed heads (``--signed-state``): the service
        refuses to sign a fork against one record, so a log that shows clients two histories is
        one whose operator keeps a record per copy — what a client must catch on its own."""
        cmd = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(ledger), "--port", str(self.port)]
        cmd += ["--key", str(self.folder / "key.pem"), "--origin", self.signer.origin]
        cmd += ["--signed-state", f"{ledger}.signed"]
        proc = subprocess.Popen(cmd, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        try:
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    requests.get(f"{self.url}/health", timeout=1)
                    break
                except requests.ConnectionError:
                    assert time.monotonic() < deadline, "ocrr serve did not start"
                    time.sleep(0.05)  # polling a process's port: it has no event to wait on
            yield self.url
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def unit_vectors(n: int, seed: int) -> np.ndarray:
    vecs = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def add_entries(url: str, n: int, seed: int, prefix: str = "entry") -> None:
    """``n`` corrections sent straight to the service (no client looking), 256 per request."""
    vecs = unit_vectors(n, seed)
    for lo in range(0, n, 256):
        part = vecs[lo : lo + 256]
        body = {
            "vectors": part.tolist(),
            "labels": [f"label{(lo + k) % 3}" for k in range(len(part))],
            "texts": [f"{prefix} {lo + k}" for k in range(len(part))],
        }
        r = requests.post(f"{url}/correct", json=body, headers=AUTH, timeout=30)
        assert r.status_code == 200, r.text


Rewrite = Callable[[str, str, bytes], bytes]  # (method, path without query, body) -> body


def _unchanged(method: str, path: str, body: bytes) -> bytes:
    return body


@contextmanager
def proxy(url: str, request: Rewrite = _unchanged, answer: Rewrite = _unchanged):
    """An HTTP proxy to ``url`` that passes GETs and POSTs through, the request body rewritten by
    ``request`` and the answer's by ``answer``; yield its URL."""

    class Handler(BaseHTTPRequestHandler):
        def _forward(self, method: str) -> None:
            path = self.path.partition("?")[0]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
            sent = request(method, path, body) if method == "POST" else None
            r = requests.request(method, url + self.path, data=sent, headers=headers, timeout=30)
            out = answer(method, path, r.content) if r.status_code == 200 else r.content
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "application/octet-stream"))
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self):
            self._forward("GET")

        def do_POST(self):
            self._forward("POST")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
