"""`ocrr serve --tls-cert` stops promptly on SIGTERM while a client holds an idle keep-alive
connection: with TLS, that connection closes only when the client answers the server's
close_notify, which an idle client never does (asyncio then waits 30 s)."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
pytest.importorskip("cryptography.x509")

from service_helpers import TOKEN, self_signed  # noqa: E402

from ocrr.service.server import STOP_GRACE_S  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tls_service_stops_promptly_with_an_idle_client_connected(tmp_path):
    cert, key = self_signed(tmp_path)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(tmp_path / "l.db"), "--port", str(port)]
        + ["--tls-cert", str(cert), "--tls-key", str(key)],
        env={**os.environ, "OCRR_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        context = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 60
        while True:  # one request on a keep-alive connection, which then stays open and idle
            assert proc.poll() is None, proc.stderr.read()
            try:
                client = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
                client.request("GET", "/health")
                assert client.getresponse().read()
                break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert took < STOP_GRACE_S + 5, f"stopping took {took:.1f} s"  # 30 s before the grace period was set
    assert "stopped: ledger" in err and "Cancel" not in err and "Traceback" not in err, err
    client.close()
