"""A ledger file dropped without ``close()`` does not leave its checkpoint thread behind."""

from __future__ import annotations

import gc
import threading

import numpy as np

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
