"""Nothing the service does may drop the POSIX locks its SQLite connections hold on the ledger
file (closing any descriptor of a file drops all of a process's locks on it): without them,
another process's connection that closes believes it is the file's last user, folds the WAL
into the file and deletes it under the running service, whose later commits are then lost."""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import free_port  # noqa: E402

from ocrr.ledger.sqlite.scan import scan_file  # noqa: E402

TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _vector(n: int) -> list[float]:
    v = np.random.default_rng(n).normal(size=8).astype(np.float32)
    return (v / np.linalg.norm(v)).tolist()


def test_acknowledged_corrections_survive_a_verify_another_reader_and_a_sigkill(tmp_path):
    ledger, port = tmp_path / "l.db", free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(ledger), "--port", str(port)]
    proc = subprocess.Popen(command, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                requests.get(f"{url}/health", timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "ocrr serve did not start"
                time.sleep(0.05)  # a process's port has no event to wait on
        for n in range(2):
            body = {"vectors": [_vector(n)], "labels": ["a"], "texts": [f"item {n}"]}
            assert requests.post(f"{url}/correct", json=body, headers=AUTH, timeout=30).status_code == 200
        assert requests.get(f"{url}/verify", headers=AUTH, timeout=60).json()["ok"]
        reader = sqlite3.connect(ledger)  # another process reads the file, then lets go of it
        assert reader.execute("SELECT count(*) FROM entries").fetchone()[0] == 2
        reader.close()
        body = {"vectors": [_vector(2)], "labels": ["b"], "texts": ["item 2"]}
        assert requests.post(f"{url}/correct", json=body, headers=AUTH, timeout=30).status_code == 200
        assert requests.get(f"{url}/verify", headers=AUTH, timeout=60).json()["ok"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
    report, _ = scan_file(ledger)
    assert report.ok and report.size == 3, report
