# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""`ocrr serve --ledger postgresql://…`: several replicas (separate processes) on one
database. Each follows the log and answers from what it holds; writes go through any of
them; a late starter loads and verifies first; a replica follows another's writes within a
bound measured here; tampering in the database makes every replica refuse to sign, naming
the entry; a replica killed mid-write loses no acknowledged correction."""

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

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")

requests = pytest.importorskip("requests")

from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: E402, F401

from ocrr.ledger.location import scan_location  # noqa: E402
from ocrr.service.state import FOLLOW_EVERY  # noqa: E402

TOKEN = "FjKym34rU16bvkxpUJ06bdvWto-Go9Rvco6pcWCrQlU"  # secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DIM = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `ocrr serve` process on the database."""

    def __init__(self, url: str):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ocrr.cli",
                "serve",
                "--ledger",
                url,
                "--port",
                str(self.port),
                "--check-every",
                "0",
            ],
            env={**os.environ, "OCRR_TOKEN": TOKEN},
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.stop()
            assert time.monotonic() < deadline, "the replica did not start"
            try:
                requests.get(f"{self.base}/health", timeout=2)
                return
            except requests.ConnectionError:
                time.sleep(0.1)

    def head(self) -> requests.Response:
        return requests.get(f"{self.base}/head", timeout=5)

    def correct(self, vecs: np.ndarray, labels: list[str]) -> dict:
        r = requests.post(
            f"{self.base}/correct", json={"vectors": vecs.tolist(), "labels": labels}, headers=AUTH, timeout=30
        )
        assert r.status_code == 200, r.text
        return r.json()

    def predict(self, vecs: np.ndarray) -> tuple[list[dict], dict]:
        """The predictions, and the prefix they were answered from (size and root headers)."""
        r = requests.post(f"{self.base}/predict", json={"vectors": vecs.tolist()}, timeout=30)
        assert r.status_code == 200, r.text
        prefix = {"size": r.headers["X-Ocrr-Ledger-Size"], "root": r.headers.get("X-Ocrr-Ledger-Root")}
        return r.json()["predictions"], prefix

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


def _vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _size(replica: Replica) -> int:
    return replica.head().json()["size"]


@pytest.fixture
def replicas(pg_url):
    started: list[Replica] = []

    def start() -> Replica:
        started.append(Replica(pg_url))
        return started[-1]

    yield start
    for r in started:
        r.stop()


def test_replicas_follow_each_others_writes_within_a_measured_bound(pg_url, replicas):
    a, b = replicas(), replicas()
    a.correct(_vectors(6, 0), ["x", "y", "z"] * 2)  # the first correction fixes the dimension
    lags = []
    for k in range(15):
        writer, reader = (a, b) if k % 2 == 0 else (b, a)  # writes through either replica
        ids = writer.correct(_vectors(1, 100 + k), [f"label-{k}"])["ids"]
        t0 = time.monotonic()
        while _size(reader) < ids[-1] + 1:
            assert time.monotonic() - t0 < FOLLOW_EVERY + 2, "a replica did not follow within the timer's bound"
            time.sleep(0.002)
        lags.append(time.monotonic() - t0)
        # the reader now answers from a prefix holding the new entry (its own vector finds it),
        # and says which: the size and root its /head signs
        predictions, prefix = reader.predict(_vectors(1, 100 + k))
        assert predictions[0]["neighbours"][0]["id"] == ids[0]
        head = reader.head().json()
        assert prefix == {"size": str(head["size"]), "root": head["root"]} and head["size"] == ids[-1] + 1
    lags.sort()
    print(f"follow lag over HTTP: median {1000 * lags[len(lags) // 2]:.1f} ms, max {1000 * lags[-1]:.1f} ms")
    assert a.head().json()["root"] == b.head().json()["root"]
    report, _ = scan_location(pg_url)
    assert report.ok and report.size == 21  # gap-free: 6 + 15, one sequence from both


def test_a_late_replica_loads_and_verifies_before_serving(pg_url, replicas):
    a = replicas()
    a.correct(_vectors(30, 1), [f"c{i % 4}" for i in range(30)])
    late = replicas()
    head = late.head().json()
    assert head["size"] == 30 and head["root"] == a.head().json()["root"]


def test_tampering_makes_every_replica_refuse_and_name_the_entry(pg_url, replicas):
    a, b = replicas(), replicas()
    a.correct(_vectors(12, 2), [f"c{i % 3}" for i in range(12)])
    while _size(b) < 12:
        time.sleep(0.01)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE ocrr_entries SET label = 'forged' WHERE seq = 7")
    found = requests.get(f"{a.base}/verify", headers=AUTH, timeout=30).json()
    assert not found["ok"] and found["first_bad"] == 7
    for replica in (a, b):  # b honours what a recorded in the database: its follower looks every tick
        deadline = time.monotonic() + FOLLOW_EVERY + 5
        body = {"vectors": _vectors(1, 3).tolist()}
        while (p := requests.post(f"{replica.base}/predict", json=body, timeout=10)).status_code == 200:
            assert time.monotonic() < deadline, "a replica still answers from the tampered log"
            time.sleep(0.05)
        assert p.status_code == 503 and "entry 7" in p.text
        r = replica.head()
        assert r.status_code == 503 and "entry 7" in r.text
        refused = requests.post(
            f"{replica.base}/correct",
            json={"vectors": _vectors(1, 3).tolist(), "labels": ["x"]},
            headers=AUTH,
            timeout=10,
        )
        assert refused.status_code == 503


def test_a_replica_killed_mid_write_loses_no_acknowledged_correction(pg_url, replicas):
    a, b = replicas(), replicas()
    a.correct(_vectors(2, 4), ["p", "q"])
    acked: dict[int, str] = {}
    stop = threading.Event()

    def write() -> None:
        k = 0
        while not stop.is_set():
            try:
                got = a.correct(_vectors(1, 1000 + k), [f"w{k}"])
            except (requests.RequestException, AssertionError):
                return
            acked[got["ids"][0]] = f"w{k}"
            k += 1

    t = threading.Thread(target=write)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    a.proc.kill()  # SIGKILL mid-write
    stop.set()
    t.join(30)
    assert len(acked) >= 20
    more = b.correct(_vectors(1, 5), ["after"])["ids"][0]  # the survivor goes on
    with psycopg.connect(pg_url) as conn:
        stored = dict(conn.execute("SELECT seq, label FROM ocrr_entries").fetchall())
    assert all(stored.get(i) == label for i, label in acked.items())
    # gap-free; an append of a's whose COMMIT was in flight may have landed before b's
    assert sorted(stored) == list(range(more + 1)) and stored[more] == "after"


def test_a_database_out_of_reach_is_no_damage(pg_url, pg_cluster):
    """A replica whose database goes down keeps answering from memory and does not fail
    closed; its checks say they could not run, and pass again once the server is back."""
    if not pg_cluster.local:
        pytest.skip("restarts the database server: needs the tests' own cluster")
    from ocrr.service.config import ServiceConfig
    from ocrr.service.state import build_state

    state = build_state(ServiceConfig(ledger=pg_url, token=TOKEN), log=lambda m: None)
    try:
        state.substrate.correct(_vectors(5, 6), list("abcde"))
        pg_cluster.kill9()
        out = state.check_file("checkpoint")
        assert out["unreachable"] and not out["ok"] and state.damage is None
        assert state.substrate.explain(_vectors(1, 6))[0].label is not None  # from memory
        pg_cluster.start()
        deadline = time.monotonic() + 20
        while not (out := state.check_file("checkpoint"))["ok"]:
            assert time.monotonic() < deadline, out
            time.sleep(0.2)
        assert state.damage is None and out["size"] == 5
    finally:
        state.close()


def test_a_database_ledger_needs_a_shared_token(pg_url):
    from ocrr.errors import OcrrError
    from ocrr.service.config import ServiceConfig
    from ocrr.service.state import build_state

    with pytest.raises(OcrrError, match="must share one token: give --token-file or OCRR_TOKEN"):
        build_state(ServiceConfig(ledger=pg_url), log=lambda m: None)
