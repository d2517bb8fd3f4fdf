"""Supervision of ``ocrr serve``: workers never outlive their supervisor, one service per
ledger and per port, worker deaths restarted with back-off, and a worker that cannot open
a tampered ledger says so in one line."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN  # noqa: E402

from ocrr.errors import OcrrError  # noqa: E402
from ocrr.service.config import ServiceConfig  # noqa: E402
from ocrr.service.supervisor import Backoff, bind, claim, supervise  # noqa: E402
from ocrr.systems.substrate.persistent import open_substrate  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENV = {**os.environ, "OCRR_TOKEN": TOKEN}


def _ledger(path, n=10):
    rng = np.random.default_rng(0)
    v = rng.normal(size=(n, 8)).astype(np.float32)
    with open_substrate(path) as sub:
        sub.correct(v / np.linalg.norm(v, axis=1, keepdims=True), [f"c{i % 3}" for i in range(n)])
    return path


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port):
    """Nothing listens on the port: a socket without SO_REUSEPORT binds it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _gone(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("State:\tZ") for line in f)  # a zombie serves nothing
    except FileNotFoundError:
        return True


def _serve(ledger, port, *more):
    return subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(ledger), "--port", str(port), *more],
        env=ENV,
        stderr=subprocess.PIPE,
        text=True,
    )


def _workers_up(url, proc, workers, deadline):
    seen = {}
    while len(seen) < workers:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"workers {sorted(seen)} of {workers} answered"
        try:
            h = requests.get(f"{url}/health", headers=AUTH, timeout=2).json()
            seen[h["worker"]] = h["pid"]
        except requests.ConnectionError:
            time.sleep(0.1)
    return seen


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return proc.stderr.read()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_the_supervisor_stops_its_workers_and_frees_the_port(tmp_path):
    port = _free_port()
    proc = _serve(_ledger(tmp_path / "l.db"), port, "--workers", "2")
    try:
        pids = _workers_up(f"http://127.0.0.1:{port}", proc, 2, time.monotonic() + 120)
        with requests.Session() as kept:  # a keep-alive connection open on a worker
            kept.get(f"http://127.0.0.1:{port}/health", headers=AUTH, timeout=2)
            proc.kill()
            proc.wait(timeout=10)
            t0 = time.monotonic()
            while not (all(_gone(p) for p in pids.values()) and _port_free(port)):
                assert time.monotonic() - t0 < 3, f"workers {pids} still alive after their supervisor died"
                time.sleep(0.05)
    finally:
        for pid in pids.values() if "pids" in locals() else ():
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        _stop(proc)


def test_a_second_service_on_the_same_ledger_or_port_is_refused(tmp_path):
    ledger, other = _ledger(tmp_path / "l.db"), _ledger(tmp_path / "other.db")
    port = _free_port()
    first = _serve(ledger, port, "--workers", "2")
    try:
        _workers_up(f"http://127.0.0.1:{port}", first, 2, time.monotonic() + 120)
        cases = [
            (ledger, _free_port(), "is already served by another `ocrr serve`"),  # same ledger, another port
            (other, port, "is already served by another `ocrr serve`"),  # same port, another ledger
        ]
        for path, p, said in cases:
            for workers in ("1", "2"):
                out = subprocess.run(
                    [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--port", str(p)]
                    + ["--workers", workers],
                    env=ENV,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert out.returncode != 0 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
                assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        for _ in range(20):  # every request still lands on the first service, with its token
            h = requests.get(f"http://127.0.0.1:{port}/head", timeout=2).json()
            assert h["size"] == 10
    finally:
        err = _stop(first)
    assert "stopped: 2 workers" in err, err
    assert sorted(os.listdir(tmp_path)) == sorted(n for n in os.listdir(tmp_path) if not n.endswith(".serve-lock")), (
        "the serve lock is removed on a clean stop"
    )


def test_a_port_another_process_listens_on_is_refused_not_shared(tmp_path):
    squatter = bind("127.0.0.1", 0, listen=True)  # shares with SO_REUSEPORT, as an orphan worker would
    port = squatter.getsockname()[1]
    try:
        with pytest.raises(OcrrError, match="another process listens there already"):
            claim(tmp_path / "l.db", "127.0.0.1", port)
    finally:
        squatter.close()
    assert os.listdir(tmp_path) == []  # a refusal leaves no lock file behind
    with claim(tmp_path / "l.db", "127.0.0.1", port) as held:
        assert held.port == port
        with pytest.raises(OcrrError, match="already served by another `ocrr serve` \\(pid"):
            claim(tmp_path / "l.db", "127.0.0.1", 0)
        with pytest.raises(OcrrError, match="127.0.0.1:.* is already served"):
            claim(tmp_path / "m.db", "127.0.0.1", port)
    with claim(tmp_path / "l.db", "127.0.0.1", 0):  # let go: the next one gets it
        pass


def _dies_saying(config, slot, workers, table):
    if config["raise"]:
        raise OcrrError("the ledger is gone; restore it")
    sys.exit(3)


def test_worker_deaths_are_restarted_with_backoff_then_given_up_with_the_cause():
    said = []
    sock = bind("127.0.0.1", 0, listen=False)
    t0 = time.monotonic()
    status = supervise(1, sock, _dies_saying, {"raise": True}, said.append, Backoff(first=0.2, give_up=4))
    took = time.monotonic() - t0
    assert status == 1
    assert [s.split("(")[0] for s in said[:3]] == ["worker 0 stopped "] * 3
    assert [s.rsplit(" in ", 1)[1] for s in said[:3]] == ["0.2 s", "0.4 s", "0.8 s"]
    assert "the ledger is gone; restore it" in said[0]
    assert said[3].startswith("worker 0 failed 4 times in a row, last: the ledger is gone; restore it")
    assert "Traceback" not in "".join(said) and len(said) == 4
    assert took >= 0.2 + 0.4 + 0.8  # it waited between starts


def _refuses_its_settings(config, slot, workers, table):
    from ocrr.errors import SettingsError

    raise SettingsError("--encoder minilm makes vectors of dimension 384, but the ledger holds 64")


def test_a_worker_refusing_its_settings_stops_the_service_at_once():
    """The same settings would fail every restart: one try, then the service stops, saying why."""
    said = []
    sock = bind("127.0.0.1", 0, listen=False)
    status = supervise(2, sock, _refuses_its_settings, {}, said.append, Backoff(first=5.0, give_up=5))
    assert status == 1
    assert said[0].startswith("worker ") and "cannot start with these settings: --encoder minilm" in said[0]
    assert said[0].endswith("; stopping the service") and not any("starting it again" in s for s in said)


def test_a_worker_that_stays_up_starts_the_count_afresh():
    said = []
    sock = bind("127.0.0.1", 0, listen=False)
    # steady=0: every death follows a worker that "stayed up", so none is ever a second failure in a row.
    import threading

    def hear(line: str) -> None:  # stop after the third restart, however long the starts take
        said.append(line)
        if len(said) == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    stop_later = threading.Timer(120.0, os.kill, (os.getpid(), signal.SIGTERM))  # only if it hangs
    stop_later.start()
    try:
        status = supervise(1, sock, _dies_saying, {"raise": False}, hear, Backoff(first=0.1, steady=0, give_up=2))
    finally:
        stop_later.cancel()
    assert status == 0 and len(said) >= 3, said
    assert all(s == "worker 0 stopped (exit status 3); starting it again in 0.1 s" for s in said), said


def test_a_worker_restarted_on_a_tampered_ledger_says_so_in_one_line(tmp_path, capfd):
    from ocrr.service.server import worker_main

    path = _ledger(tmp_path / "l.db")
    with open_substrate(path):  # a full check records a checkpoint, as `ocrr serve` does before its workers
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET label = 'forged' WHERE id = 3")
    config = ServiceConfig(ledger=path, token=TOKEN, port=0, quick_open=True)  # as a worker opens it
    said = []
    assert supervise(1, bind("127.0.0.1", 0, listen=False), worker_main, config, said.append, Backoff(give_up=1)) == 1
    err = capfd.readouterr().err
    assert len(said) == 1 and "is damaged at entry 3" in said[0] and "restore the file from a backup" in said[0]
    assert "Traceback" not in err and "other settings" not in err and "quick" not in err, err
    assert [line for line in err.splitlines() if line.strip()] == [
        f"[worker 0] error: {said[0].split('last: ')[1].split('; stopping')[0]}"
    ], err


def _waits_for_its_handoff(config, slot, workers, table, handoff):
    config["started"].release()  # started before the supervisor's preparation is done
    try:
        handed = handoff.recv()
    except EOFError:
        sys.exit(0)
    with open(config["out"], "a") as out:
        out.write(f"{slot} {handed}\n")
    sys.exit(3)


def test_workers_start_while_the_supervisor_prepares_and_each_gets_what_it_prepared(tmp_path):
    """``ocrr serve --workers N`` starts its workers while it checks the ledger: each waits
    for the check's result, the workers started before it ends and the ones restarted after."""
    import multiprocessing as mp

    started = mp.get_context("spawn").Semaphore(0)
    out = tmp_path / "handed"
    said = []

    def prepare():
        for _ in range(2):  # both workers are up before this returns
            assert started.acquire(timeout=120)
        return "checked"

    config = {"started": started, "out": str(out)}
    sock = bind("127.0.0.1", 0, listen=False)
    status = supervise(
        2, sock, _waits_for_its_handoff, config, said.append, Backoff(first=0.1, give_up=2), prepare=prepare
    )
    # Each worker exits once handed it and is restarted; the first slot to fail twice stops the
    # service, whether or not the other one's restart has come yet.
    assert status == 1
    handed = Counter(out.read_text().splitlines())
    assert set(handed) == {"0 checked", "1 checked"}  # both started before the preparation ended
    assert max(handed.values()) == 2  # and one restarted after it was handed it again


def test_a_preparation_that_fails_stops_the_workers_and_is_raised(tmp_path):
    import multiprocessing as mp

    started = mp.get_context("spawn").Semaphore(0)

    def prepare():
        for _ in range(2):
            assert started.acquire(timeout=120)
        raise OcrrError("ledger l.db is damaged at entry 3: restore it")

    config = {"started": started, "out": str(tmp_path / "handed")}
    with pytest.raises(OcrrError, match="damaged at entry 3"):
        supervise(2, bind("127.0.0.1", 0, listen=False), _waits_for_its_handoff, config, [].append, prepare=prepare)
    assert not mp.active_children()
    assert not (tmp_path / "handed").exists()  # no worker went on to open the ledger
