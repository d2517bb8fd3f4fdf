"""`ocrr serve --workers N --pin-workers`: each worker, and every thread it starts to answer
requests, stays on its own core; a restarted worker goes back to its slot's core; a bad
combination is refused at the door."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
pytest.importorskip("requests")
if not hasattr(os, "sched_getaffinity"):
    pytest.skip("CPU affinity is Linux's", allow_module_level=True)

from service_helpers import TOKEN, free_port, serve_workers, session_on, wait_for_workers  # noqa: E402

from ocrr.systems.substrate.persistent import open_substrate  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _threads(pid: int) -> set[int]:
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


def test_each_worker_and_the_threads_it_starts_stay_on_its_own_core(tmp_path):
    rng = np.random.default_rng(0)
    v = rng.normal(size=(30, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    with open_substrate(tmp_path / "l.db") as sub:
        sub.correct(v, [f"c{i % 3}" for i in range(30)])
    cores = sorted(os.sched_getaffinity(0))  # the service inherits this process's cores
    port = free_port()
    proc = serve_workers(tmp_path / "l.db", port, "--pin-workers")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        pids = wait_for_workers(url, proc, 2, deadline)
        for slot, pid in pids.items():
            assert os.sched_getaffinity(pid) == {cores[slot % len(cores)]}, (slot, pid)
        # The committer thread starts with a worker's first correction: it inherits the core.
        for slot, pid in pids.items():
            before = _threads(pid)
            session = session_on(url, slot, deadline)
            q = (v[slot] + 0.01) / np.linalg.norm(v[slot] + 0.01)
            r = session.post(f"{url}/correct", json={"vectors": [q.tolist()], "labels": ["new"]}, headers=AUTH)
            assert r.status_code == 200, r.text
            started = _threads(pid) - before
            assert started, "a first correction starts the committer thread"
            assert all(os.sched_getaffinity(t) == {cores[slot % len(cores)]} for t in started)
        os.kill(pids[1], signal.SIGKILL)  # its successor in slot 1 goes back to slot 1's core
        again = wait_for_workers(url, proc, 2, time.monotonic() + 120, exclude_pids={pids[1]})
        assert os.sched_getaffinity(again[1]) == {cores[1 % len(cores)]}
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert status == 0, err
    assert f"[worker 0] on core {cores[0]}" in err and f"[worker 1] on core {cores[1 % len(cores)]}" in err, err


def test_without_the_flag_workers_may_run_on_every_core(tmp_path):
    with open_substrate(tmp_path / "l.db") as sub:
        sub.correct(np.eye(4, 16, dtype=np.float32), ["a", "b", "a", "b"])
    port = free_port()
    proc = serve_workers(tmp_path / "l.db", port)
    try:
        pids = wait_for_workers(f"http://127.0.0.1:{port}", proc, 2, time.monotonic() + 120)
        assert all(os.sched_getaffinity(pid) == os.sched_getaffinity(0) for pid in pids.values())
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_pinning_one_worker_is_refused_at_the_door_with_the_fix(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(tmp_path / "l.db"), "--pin-workers"],
        env={**os.environ, "OCRR_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "add --workers N" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "l.db").exists()
