"""`ocrr serve --workers 2`: two processes on one port and one ledger file answer for
each other's corrections, count together in /metrics, agree on the head, are restarted
when one dies, and stop cleanly with every acknowledged correction on file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, session_on, wait_for_workers  # noqa: E402

from ocrr.ledger.sqlite.store import DurableLedger  # noqa: E402
from ocrr.systems.substrate.persistent import open_substrate  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _vecs(rng, m, d=16):
    v = rng.normal(size=(m, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_workers_answer_for_each_other_and_stop_cleanly(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "served.db"
    with open_substrate(path) as sub:
        sub.correct(_vecs(rng, 30), [f"c{i % 3}" for i in range(30)])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--port", str(port), "--workers", "2"],
        env={**os.environ, "OCRR_TOKEN": TOKEN},
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    acked = []
    try:
        deadline = time.monotonic() + 120
        pids = wait_for_workers(url, proc, 2, deadline)
        on = [session_on(url, 0, deadline), session_on(url, 1, deadline)]
        for k in range(6):  # correct through one worker, predict at once through the other
            writer, reader = on[k % 2], on[1 - k % 2]
            q = _vecs(rng, 1)
            r = writer.post(
                f"{url}/correct", json={"vectors": np.repeat(q, 3, 0).tolist(), "labels": [f"new{k}"] * 3}, headers=AUTH
            )
            assert r.status_code == 200, r.text
            acked += [(i, f"new{k}") for i in r.json()["ids"]]
            got = reader.post(f"{url}/predict", json={"vectors": q.tolist()}).json()["predictions"][0]
            assert got["label"] == f"new{k}"
            assert {n["id"] for n in got["neighbours"]} >= set(r.json()["ids"])
        heads = [s.get(f"{url}/head").json() for s in on]
        assert heads[0]["size"] == heads[1]["size"] == 48 and heads[0]["root"] == heads[1]["root"]
        metrics = on[0].get(f"{url}/metrics").text
        assert "ocrr_workers 2" in metrics
        assert "ocrr_ledger_commits_total 6" in metrics  # three by each worker, counted together
        assert 'ocrr_requests_total{path="/correct",status="200"} 6' in metrics
        verified = on[0].get(f"{url}/verify", headers=AUTH).json()  # the page of the other worker shows it
        assert verified["ok"] and on[1].get(f"{url}/corrections/recent", headers=AUTH).json()["last_verify"] == verified

        os.kill(pids[1], signal.SIGKILL)  # a worker dies: the supervisor starts another in its slot
        wait_for_workers(url, proc, 2, time.monotonic() + 120, exclude_pids={pids[1]})
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert status == 0 and "worker 1 stopped" in err and "stopped: 2 workers" in err, err
    with DurableLedger.open(path) as led:  # full check of chain and tree
        assert len(led) == 48
        assert all(led.memory.labels[i] == label for i, label in acked)


def test_a_bad_worker_count_is_refused_with_the_fix(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(tmp_path / "l.db"), "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OCRR_TOKEN": TOKEN},
    )
    assert (
        out.returncode != 0
        and "--workers must be an integer in [1, 64]" in out.stderr
        and "Traceback" not in out.stderr
    )
    assert not (tmp_path / "l.db").exists()


def _dies_at_once(config, slot, workers, table):
    sys.exit(3)


def test_a_worker_that_keeps_dying_stops_the_service_instead_of_spinning():
    from ocrr.service.supervisor import Backoff, bind, supervise

    said = []
    sock = bind("127.0.0.1", 0, listen=False)
    t0 = time.monotonic()
    assert supervise(1, sock, _dies_at_once, {}, said.append, Backoff(first=0.1, give_up=3)) == 1
    assert 0.1 + 0.2 <= time.monotonic() - t0 < 60
    assert "starting it again in 0.1 s" in said[0] and "starting it again in 0.2 s" in said[1]
    assert "failed 3 times in a row, last: exit status 3" in said[2] and len(said) == 3
