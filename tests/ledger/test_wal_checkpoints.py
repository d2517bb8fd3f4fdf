"""WAL checkpoints run beside the commits, never inside one, and lose no acknowledged entry.

A durable ledger's commits only fsync SQLite's log; its own thread copies the log into the
database file (``ocrr.ledger.sqlite.wal``). These tests read the database file alone (a copy
without its ``-wal``) to see what a checkpoint really copied.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from ocrr.ledger import DurableLedger

HERE = Path(__file__).parent


def _file_alone(path: Path, tmp: Path) -> int:
    """The entries in the database file itself, without what only its log holds."""
    alone = tmp / "alone.db"
    shutil.copyfile(path, alone)  # the -wal stays behind: only checkpointed pages are read
    conn = sqlite3.connect(alone)
    try:
        return conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    except sqlite3.OperationalError:  # not even the tables are checkpointed yet
        return 0
    finally:
        conn.close()


def _rows(n: int, lo: int = 0) -> tuple[np.ndarray, list[str]]:
    vecs = np.random.default_rng(lo).normal(size=(n, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # a durable ledger takes unit rows only
    return vecs, [f"l{i % 5}" for i in range(lo, lo + n)]


def test_commits_leave_the_log_to_the_background_checkpointer(tmp_path):
    """The writing connections never checkpoint (``wal_autocheckpoint`` 0); once enough is
    committed, the ledger's checkpointer copies the log into the file."""
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=8) as led:
        assert led._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert led._watch.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        led.wal.every = 10**12  # none yet: a large log stays a log
        for k in range(20):
            led.extend(*_rows(50, 50 * k))
        assert _file_alone(path, tmp_path) < 1000
        led.wal.every = 1  # now the next commit's bytes start one
        led.extend(*_rows(10, 1000))
        assert led.wal.wait(1, timeout=60)
        assert _file_alone(path, tmp_path) == 1010
    with DurableLedger.open(path) as again:  # full check: chain and tree
        assert len(again) == 1010


def test_an_acknowledged_entry_survives_a_kill_while_checkpoints_run(tmp_path):
    """A process checkpoints, then appends on while its checkpointer copies the log after
    every commit, and is SIGKILLed part-way: every acknowledged entry is there on reopening,
    and the first ones are in the database file itself (a checkpoint really ran)."""
    from checkpoint_child import label, vec

    path = tmp_path / "crash.db"
    child = subprocess.Popen(
        [sys.executable, str(HERE / "checkpoint_child.py"), str(path), "1", "300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        checkpointed = int(child.stdout.readline().split()[1])
        acked = max(int(child.stdout.readline().split()[1]) for _ in range(20))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert checkpointed == 299 and acked >= 299 + 20 * 300
    try:
        in_file = _file_alone(path, tmp_path)
    except sqlite3.DatabaseError:  # killed mid-checkpoint: the file alone is half copied (its log repairs it)
        in_file = None
    assert in_file is None or in_file >= checkpointed + 1
    with DurableLedger.open(path) as led:  # full check: refuses a broken chain or tree
        assert len(led) > acked
        for i in range(len(led)):
            assert led.memory[i].label == label(i) and np.array_equal(led.memory[i].vector, vec(i))


def _log_frames(path: Path) -> int:
    """The frames SQLite's log holds now (what a checkpoint would have to copy from scratch)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
    finally:
        conn.close()


def test_the_log_starts_over_under_commits_that_never_pause(tmp_path):
    """Passive checkpoints alone never let the log start over while commits keep coming, so
    once enough was committed one checkpoint runs between two commits: the next commit writes
    the log from its beginning, and it stops growing."""
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=8) as led:
        led.wal.every = led.wal.restart_every = 10**12  # none yet
        for k in range(20):
            led.extend(*_rows(50, 50 * k))
        grown = _log_frames(path)
        led.wal.every, led.wal.restart_every = 1, 1  # the next commit's bytes start a restarting one
        led.extend(*_rows(10, 1000))
        assert led.wal.wait(1, timeout=60, restarts=True)
        led.extend(*_rows(10, 1010))
        assert _log_frames(path) < grown / 4  # the last commit's frames, from the log's start
    with DurableLedger.open(path) as again:  # full check: chain and tree
        assert len(again) == 1020


def test_the_log_stays_bounded_while_two_threads_append_without_pause(tmp_path):
    """Two threads keep the committer busy (each extend queues behind the other's commit):
    the log stays a fraction of what was written, where passive checkpoints alone let it
    hold all of it."""
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(50, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # a durable ledger takes unit rows only
    with DurableLedger.open(path, dim=384) as led:
        led.wal.every, led.wal.restart_every = 256 * 1024, 1024 * 1024

        def append() -> None:
            for _ in range(100):
                led.extend(vecs, ["a"] * len(vecs))

        threads = [threading.Thread(target=append) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        written = len(led) * vecs.shape[1] * 4  # the vectors' bytes alone
        assert Path(f"{path}-wal").stat().st_size < written / 3
