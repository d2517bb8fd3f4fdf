# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""A ledger dropped without ``close()`` leaves no thread behind: its WAL checkpoints stop, and its
committer holds it only while appends are queued, so it is collected (files and pool let go)."""

from __future__ import annotations

import gc
import os
import threading
import weakref

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401
from tests.ledger.submitted import submit_rows

from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.sqlite.wal import BackgroundCheckpoints


def test_a_ledger_dropped_without_close_stops_its_checkpoint_thread(tmp_path):
    led = DurableLedger.open(tmp_path / "l.db", dim=4)
    led.extend(np.eye(4, dtype=np.float32), list("abcd"))
    thread = led.wal._thread
    assert thread.is_alive()
    del led
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()
    with DurableLedger.open(tmp_path / "l.db") as again:  # the file as it was, whole
        assert len(again) == 4 and again.verify().ok


def test_checkpoints_closed_from_their_own_thread_stop_it(tmp_path):
    DurableLedger.open(tmp_path / "l.db", dim=4).close()  # a ledger file for the checkpoints
    checkpoints = BackgroundCheckpoints(tmp_path / "l.db", every=1)
    stopped = threading.Event()
    real_run = checkpoints._conn.execute

    def close_from_inside(sql, *args):  # as a ledger collected on this thread would
        checkpoints.close()
        stopped.set()
        return real_run(sql, *args)

    checkpoints._conn = _Wrapped(checkpoints._conn, close_from_inside)
    checkpoints.committed(10)  # a checkpoint is due: the thread runs one, and closes itself there
    assert stopped.wait(30)
    checkpoints._thread.join(timeout=30)
    assert not checkpoints._thread.is_alive()
    checkpoints.close()  # and again from here: nothing left to do


class _Wrapped:
    """A connection whose ``execute`` goes through ``fn`` (the rest as it is)."""

    def __init__(self, conn, fn):
        self._conn, self.execute = conn, fn

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _submitted(led, n: int) -> list:
    """``n`` entries appended through ``submit``, waited for: their (ids, error)."""
    told, done = submit_rows(led, n, 4)
    assert done.wait(30)
    return told


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the process's descriptors in /proc")
def test_a_ledger_appended_to_through_submit_and_dropped_unclosed_is_let_go(tmp_path):
    """Its committer thread holds it only while appends are queued: dropped without
    ``close()``, it is collected and the thread ends."""
    DurableLedger.open(tmp_path / "l.db", dim=4).close()
    fds = set(os.listdir("/proc/self/fd"))
    led = DurableLedger.open(tmp_path / "l.db")
    assert [ids for ids, err in _submitted(led, 6) if err is None] == [range(i, i + 1) for i in range(6)]
    committer, gone = led._committer, weakref.ref(led)
    assert committer is not None and committer.is_alive()
    del led
    gc.collect()
    assert gone() is None
    committer.join(timeout=30)
    assert not committer.is_alive()
    # its connections, the writers' lock file and its hold on the file are let go with it (a
    # descriptor of something else may have closed meanwhile: only new ones would be its)
    assert set(os.listdir("/proc/self/fd")) - fds == set()
    with DurableLedger.open(tmp_path / "l.db") as again:
        assert len(again) == 6 and again.verify().ok


def test_appends_queued_when_the_ledger_is_dropped_are_still_committed_and_told(tmp_path):
    """A submitter that drops the ledger right after ``submit`` still hears back, and the
    entries are in the file: the committer holds the ledger until its queue is empty."""
    led = DurableLedger.open(tmp_path / "l.db", dim=4)
    _submitted(led, 1)  # the committer runs
    told: list = []
    done = threading.Event()
    with led._cv:  # hold the committer back until the ledger is dropped
        led.submit(
            np.eye(4, dtype=np.float32)[:2], ["a", "b"], None, lambda ids, err: (told.append((ids, err)), done.set())
        )
        gone = weakref.ref(led)
        cv = led._cv
        del led
        gc.collect()
        assert gone() is not None  # queued: held
    assert done.wait(30) and told == [(range(1, 3), None)]
    del cv
    gc.collect()
    assert gone() is None
    with DurableLedger.open(tmp_path / "l.db") as again:
        assert len(again) == 3 and again.verify().ok


def test_a_postgresql_ledger_dropped_unclosed_is_let_go_with_its_pool(pg_url):
    from ocrr.ledger.postgres.store import PostgresLedger

    before = set(threading.enumerate())
    led = PostgresLedger.open(pg_url, dim=4)
    _submitted(led, 3)
    gone = weakref.ref(led)
    del led
    gc.collect()
    assert gone() is None
    for thread in set(threading.enumerate()) - before:  # the committer's, the pool's
        thread.join(timeout=30)
        assert not thread.is_alive(), thread.name
    with PostgresLedger.open(pg_url) as again:
        assert len(again) == 3 and again.verify().ok
