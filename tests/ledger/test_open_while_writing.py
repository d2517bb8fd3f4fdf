"""Opening a ledger file while another ledger on it commits without pause: the open queues
with the writers on the file's writer lock, so neither it nor the writer waits in SQLite's
busy handler, where a steady stream of commits can starve a waiter past its busy timeout."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ocrr.ledger.sqlite.store as store
from ocrr.ledger.sqlite.store import DurableLedger

# SQLite's busy timeout is 5 s; a short one makes any wait in its busy handler show at once.
_BUSY_TIMEOUT_MS = 20


@pytest.fixture
def short_busy_timeout(monkeypatch):
    connect = store.connect

    def connect_short(path, readonly=False):
        conn = connect(path, readonly)
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        return conn

    monkeypatch.setattr(store, "connect", connect_short)


def _vecs(rng, m, d=8):
    v = rng.normal(size=(m, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("verify", ["full", "checkpoint"])
def test_every_open_succeeds_and_sees_what_was_acknowledged_while_another_ledger_commits(
    tmp_path, short_busy_timeout, verify
):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    with DurableLedger.open(path, dim=8) as writer:
        writer.extend(_vecs(rng, 2000), ["old"] * 2000)  # an open's check takes a while
        stop = threading.Event()
        acked = [len(writer)]  # the ledger's size after each of the writer's commits
        errors: list[BaseException] = []
        progress = threading.Condition()  # notified after each commit and on an error

        def commit_nonstop():
            wrng = np.random.default_rng(1)
            while not stop.is_set():
                try:
                    writer.extend(_vecs(wrng, 1), ["new"])
                except BaseException as e:
                    with progress:
                        errors.append(e)
                        progress.notify_all()
                    return
                with progress:
                    acked.append(len(writer))
                    progress.notify_all()

        thread = threading.Thread(target=commit_nonstop)
        thread.start()
        try:
            for _ in range(30):
                with progress:  # open while the writer is at it: it has just committed again
                    commits = len(acked)
                    progress.wait_for(lambda n=commits: len(acked) > n or bool(errors), timeout=30)
                    assert len(acked) > commits and not errors, errors
                    before = acked[-1]
                with DurableLedger.open(path, verify=verify) as led:
                    assert len(led) >= before
                    assert list(led.memory.labels[:before]) == ["old"] * 2000 + ["new"] * (before - 2000)
        finally:
            stop.set()
            thread.join()
        assert not errors, errors[0]
