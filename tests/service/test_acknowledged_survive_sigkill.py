"""A correction the service acknowledged is on disk: corrections sent concurrently to a real
`ocrr serve` (answered through the group commit's committer thread), the server SIGKILLed in
the middle of them, and every acknowledged one is in the reopened, fully checked ledger."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN  # noqa: E402

from ocrr.ledger.sqlite.store import DurableLedger  # noqa: E402
from ocrr.systems.substrate.persistent import open_substrate  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
D = 16


def _unit(rng, m):
    v = rng.normal(size=(m, D)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _serve(path, port):
    return subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--port", str(port)],
        env={**os.environ, "OCRR_TOKEN": TOKEN},
        stderr=subprocess.DEVNULL,
    )


def _up(url, proc, deadline):
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the server exited"
        try:
            requests.get(f"{url}/health", timeout=2)
            return
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError("the server did not start")


def _correct_until(url, label, vecs, stop, acked, lock):
    """One client: corrections one after another until ``stop``, or until the server dies;
    each acknowledged one appended to ``acked`` as (id, label, text)."""
    session = requests.Session()
    n = 0
    while not stop.is_set():
        text = f"{label} item {n}"
        body = {"vectors": vecs[n % len(vecs)][None].tolist(), "labels": [label], "texts": [text]}
        try:
            r = session.post(f"{url}/correct", json=body, headers=AUTH, timeout=10)
        except requests.RequestException:
            return  # the server died with this request in flight: not acknowledged
        assert r.status_code == 200, r.text
        with lock:
            acked.append((r.json()["ids"][0], label, text))
        n += 1


def test_sigkill_loses_no_acknowledged_correction(tmp_path):
    path = tmp_path / "served.db"
    rng = np.random.default_rng(0)
    with open_substrate(path) as sub:
        sub.correct(_unit(rng, 10), [f"seed{i}" for i in range(10)])
    acked: list[tuple[int, str, str]] = []  # (id, label, text) of every acknowledged correction
    lock = threading.Lock()
    for round_ in range(2):  # killed twice, restarted on the same file in between
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        proc = _serve(path, port)
        try:
            _up(url, proc, time.monotonic() + 120)
            stop = threading.Event()

            threads = [
                threading.Thread(target=_correct_until, args=(url, f"r{round_}c{c}", _unit(rng, 8), stop, acked, lock))
                for c in range(6)
            ]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while len(acked) < 40 * (round_ + 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)  # with corrections in flight
            stop.set()
            for t in threads:
                t.join(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        with DurableLedger.open(path) as led:  # full check of chain and tree
            mem = led.memory
            assert len(led) >= 10 + len(acked)
            missing = [a for a in acked if a[0] >= len(mem) or (mem[a[0]].label, mem[a[0]].text) != a[1:]]
            assert not missing, missing[:3]
    assert len(acked) >= 80 and len({a[0] for a in acked}) == len(acked)
