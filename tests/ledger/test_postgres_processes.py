# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""The PostgreSQL ledger with several processes: concurrent writers leave no gap or
duplicate; a writer killed mid-write, or the database server killed mid-write, loses no
acknowledged entry; a follower takes in other processes' entries on NOTIFY, catches up after
the server restarts, and stops on entries that do not chain on."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger.location import scan_location
from ocrr.ledger.postgres.follow import Follower
from ocrr.ledger.postgres.store import PostgresLedger

DIM = 8


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)  # a durable ledger takes unit rows only


def _writer(url: str, prefix: str, count: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ledger.pg_writer", url, prefix, str(count)],
        stdout=subprocess.PIPE,
        bufsize=0,  # unbuffered: select() sees every byte not yet read
    )


def _acked(out: str) -> dict[int, str]:
    acked = {}
    for line in out.splitlines():
        i, label = line.split()
        assert int(i) not in acked, f"id {i} acknowledged twice"
        acked[int(i)] = label
    return acked


def _stored(url: str) -> dict[int, str]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT seq, label FROM ocrr_entries ORDER BY seq").fetchall())


def _wait_for_lines(proc: subprocess.Popen, n: int, lines: list[str], timeout: float = 60) -> None:
    """Read the writer's acknowledgements until ``n`` arrived; fail (not hang) after ``timeout``
    seconds, even when the writer goes silent."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while len(lines) < n:
        left = deadline - time.monotonic()
        ready = left > 0 and select.select([proc.stdout], [], [], left)[0]
        assert ready, f"only {len(lines)} acknowledgements in {timeout} s"
        line = proc.stdout.readline()
        assert line, "the writer ended early"
        lines.append(line.decode())


def _rest(proc: subprocess.Popen) -> str:
    """What the writer printed that was not read yet (it was killed: until its pipe closes)."""
    return proc.communicate(timeout=30)[0].decode()


def test_concurrent_writers_leave_no_gap_or_duplicate(pg_url):
    PostgresLedger.open(pg_url, dim=DIM).close()
    procs = [_writer(pg_url, f"w{k}", 150) for k in range(4)]
    outs = [p.communicate(timeout=120)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    acked = {}
    for out in outs:
        mine = _acked(out)
        assert not set(mine) & set(acked), "two writers got the same id"
        acked.update(mine)
    assert sorted(acked) == list(range(600))  # gap-free, every id once
    assert _stored(pg_url) == acked  # each id holds the entry its writer was told
    report, _ = scan_location(pg_url)
    assert report.ok and report.size == 600


def test_a_writer_killed_mid_write_loses_no_acknowledged_entry(pg_url):
    PostgresLedger.open(pg_url, dim=DIM).close()
    proc, lines = _writer(pg_url, "k", 0), []
    _wait_for_lines(proc, 200, lines)
    proc.kill()  # SIGKILL, in the middle of whatever append it was doing
    rest = _rest(proc)
    acked = _acked("".join(lines) + rest)
    stored = _stored(pg_url)
    assert all(stored.get(i) == label for i, label in acked.items())
    assert sorted(stored) == list(range(len(stored)))  # an unacknowledged one may be there; no gap
    with PostgresLedger.open(pg_url) as again:  # the full check passes, and appends go on
        assert len(again) >= len(stored)  # a COMMIT in flight when the writer died may land after our read
        again.append(np.full(DIM, DIM**-0.5), "after")  # a durable ledger takes unit rows only


def test_the_server_killed_mid_write_loses_no_acknowledged_entry(pg_url, pg_cluster):  # noqa: F811
    if not pg_cluster.local:
        pytest.skip("kills the database server: needs the tests' own cluster, not OCRR_TEST_PG_DSN")
    PostgresLedger.open(pg_url, dim=DIM).close()
    proc, lines = _writer(pg_url, "s", 0), []
    try:
        _wait_for_lines(proc, 100, lines)
        pg_cluster.kill9()  # postmaster and backends: no shutdown checkpoint, recovery from the WAL
        time.sleep(0.3)
        pg_cluster.start()
        before = len(lines)
        _wait_for_lines(proc, before + 100, lines)  # the writer's pool reconnected; appends go on
    finally:
        proc.kill()
        rest = _rest(proc)
    acked = _acked("".join(lines) + rest)
    stored = _stored(pg_url)
    lost = [i for i, label in acked.items() if stored.get(i) != label]
    assert not lost, f"acknowledged entries lost or changed: {lost[:10]}"
    report, _ = scan_location(pg_url)
    assert report.ok and report.size >= len(stored) >= len(acked)


def test_a_follower_takes_in_others_entries_on_notify(pg_url):
    rng = np.random.default_rng(0)
    with PostgresLedger.open(pg_url, dim=DIM) as writer, PostgresLedger.open(pg_url) as replica:
        follower = Follower(replica, every=60).start()  # the timer is out of play: NOTIFY wakes it
        lags = []
        for _ in range(20):
            ids = writer.extend(_unit(rng.standard_normal((2, DIM)).astype(np.float32)), ["a", "b"])
            t0 = time.monotonic()
            while len(replica) < ids[-1] + 1:
                assert time.monotonic() - t0 < 5, "the follower did not take in the new entries"
                time.sleep(0.001)
            lags.append(time.monotonic() - t0)
        assert replica.head() == writer.head() and follower.wakeups >= 1
        assert max(lags) < 5
    assert not follower._thread.is_alive()


def test_a_follower_catches_up_after_the_server_restarts(pg_url, pg_cluster):  # noqa: F811
    if not pg_cluster.local:
        pytest.skip("restarts the database server: needs the tests' own cluster")
    rng = np.random.default_rng(1)
    with PostgresLedger.open(pg_url, dim=DIM) as replica:
        follower = Follower(replica, every=0.5).start()
        assert follower.listening.wait(10)
        pg_cluster.kill9()
        pg_cluster.start()
        with PostgresLedger.open(pg_url) as writer:  # written while the follower reconnects
            writer.extend(_unit(rng.standard_normal((5, DIM)).astype(np.float32)), list("abcde"))
            deadline = time.monotonic() + 20
            while len(replica) < 5:
                assert time.monotonic() < deadline, f"not caught up: {follower.error}"
                time.sleep(0.02)
            assert replica.root() == writer.root()
        assert follower.reconnects >= 1


def test_a_follower_stops_on_entries_that_do_not_chain_on(pg_url):
    rng = np.random.default_rng(2)
    seen: list[OcrrError] = []
    got = threading.Event()

    def on_error(e: OcrrError) -> None:
        seen.append(e)
        got.set()

    with PostgresLedger.open(pg_url, dim=DIM) as writer, PostgresLedger.open(pg_url) as replica:
        writer.extend(_unit(rng.standard_normal((3, DIM)).astype(np.float32)), list("abc"))
        replica.refresh()
        Follower(replica, every=0.2, on_error=on_error).start()
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a forged entry, appended by hand
            conn.execute("SET session_replication_role = replica")
            conn.execute(
                "INSERT INTO ocrr_entries VALUES (3, 'forged', NULL, %s, %s, %s, %s)",
                (b"\x00" * 4 * DIM, b"\x01" * 32, b"\x02" * 32, b"\x03" * 32),
            )
            conn.execute("UPDATE ocrr_head SET size = 4")
        assert got.wait(10), "the follower did not report the forged entry"
        assert "entry 3" in str(seen[0])
        with pytest.raises(OcrrError, match="entry 3"):
            replica.pull()  # refused from now on, not taken in
