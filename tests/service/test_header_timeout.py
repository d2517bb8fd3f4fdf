"""Slowloris: a client that opens connections and sends their request headers a byte at a
time would hold each connection (and the server's memory for it) for as long as it likes.
``ocrr serve --header-timeout N`` closes a connection whose request headers are not all
in N seconds after it opened, or after the previous answer on it."""

from __future__ import annotations

import socket
import time

import pytest
from service_helpers import free_port, serve_workers, wait_for_workers

from ocrr.errors import OcrrError
from ocrr.service.config import ServiceConfig

TIMEOUT = 1.0


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes the connection; fails if it is still open after ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    while chunk := sock.recv(4096):  # b"": the server closed it
        got += chunk
    return got


@pytest.mark.parametrize("workers", [1, 2])
def test_a_connection_without_complete_headers_is_closed(tmp_path, workers):
    port = free_port()
    proc = serve_workers(tmp_path / "l.db", port, "--header-timeout", str(TIMEOUT), workers=workers)
    try:
        wait_for_workers(f"http://127.0.0.1:{port}", proc, workers, time.monotonic() + 120)
        half = socket.create_connection(("127.0.0.1", port))
        silent = socket.create_connection(("127.0.0.1", port))
        started = time.monotonic()
        half.sendall(b"GET /health HT")  # half a request line, then nothing
        _closed_within(half, 10 * TIMEOUT)
        assert time.monotonic() - started >= TIMEOUT * 0.9
        _closed_within(silent, 10 * TIMEOUT)
        # A whole request is answered; half of the next one on the same connection is not waited for.
        kept = socket.create_connection(("127.0.0.1", port))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        kept.settimeout(10)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: 12")
        _closed_within(kept, 10 * TIMEOUT)
        for s in (half, silent, kept):
            s.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_timeout_is_checked_at_the_door(tmp_path):
    assert ServiceConfig(ledger=tmp_path / "l.db").header_timeout == 10
    for bad in (0, -1, float("inf"), float("nan"), "10", True):
        with pytest.raises(OcrrError, match=r"--header-timeout must be a number > 0"):
            ServiceConfig(ledger=tmp_path / "l.db", header_timeout=bad)
