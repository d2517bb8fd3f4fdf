"""Entries hashed ahead of their commit (ocrr.ledger.hash_ahead) are the same bytes as
entries hashed in the commit: taken only when they start at the same id after the same chain
hash, hashed again otherwise (a failed commit, another process's entries in between)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading

import numpy as np

from ocrr.ledger.chain import GENESIS, entry_digest
from ocrr.ledger.group_commit import Pending
from ocrr.ledger.hash_ahead import HashAhead, hashed_rows
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.verify import entry_bytes, leaf_hash

DIM = 4


def _item(k: int, m: int = 3) -> Pending:
    vecs = np.arange(k * m * DIM, (k + 1) * m * DIM, dtype=np.float32).reshape(m, DIM) / 7
    texts = [f"text {k}-{j}" if j % 2 else None for j in range(m)]
    return Pending(vecs, [f"label {k}-{j}" for j in range(m)], texts)


def _expected(item: Pending, start: int, prev: bytes):
    """The rows, leaves and digests of ``item`` at ids ``start``.. after ``prev``, by the
    chain's and the verifier's own functions."""
    rows, leaves, digests = [], [], []
    for j, (label, text) in enumerate(zip(item.labels, item.texts)):
        raw = item.vecs[j].astype("<f4").tobytes()
        digest = entry_digest(start + j, label, text, item.vecs[j], prev)
        rows.append((start + j, label, text, raw, prev, digest))
        leaves.append(leaf_hash(entry_bytes(start + j, label, text, raw, prev)))
        digests.append(digest)
        prev = digest
    return rows, leaves, digests


def test_hashes_made_ahead_are_taken_only_where_they_were_made_for():
    item = _item(0)
    at_five = hashed_rows(item, 5, GENESIS)
    assert at_five[2:] == _expected(item, 5, GENESIS)
    item.hashed = at_five
    assert hashed_rows(item, 5, GENESIS) is at_five
    other = b"\x07" * 32
    assert hashed_rows(item, 6, GENESIS)[2:] == _expected(item, 6, GENESIS)  # another id: hashed again
    assert hashed_rows(item, 5, other)[2:] == _expected(item, 5, other)  # another chain: hashed again


def test_the_thread_hashes_the_queue_in_order_and_stops_when_paused():
    ahead = HashAhead()
    try:
        queue = [_item(0), _item(1)]
        ahead.resume(queue, 10, GENESIS)
        queue.append(_item(2))  # queued after it resumed
        ahead.queued()
        assert ahead.wait_hashed(30)
        start, prev = 10, GENESIS
        for item in queue:
            assert item.hashed is not None and item.hashed[:2] == (start, prev)
            assert item.hashed[2:] == _expected(item, start, prev)
            start, prev = start + 3, item.hashed[4][-1]
        ahead.pause()
        queue.append(late := _item(3))
        ahead.queued()
        assert ahead.wait_hashed(30) and late.hashed is None  # paused: left to its commit
    finally:
        ahead.close()


def _tables(path) -> tuple[list, list, list]:
    conn = sqlite3.connect(path)
    try:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in ("entries", "nodes", "meta")
        )
    finally:
        conn.close()


def _same_file_by_extend(path, items) -> None:
    with DurableLedger.open(path, dim=DIM) as led:
        for item in items:
            led.extend(item.vecs, item.labels, item.texts)


def _submit_held(led: DurableLedger, item: Pending) -> tuple[threading.Event, list]:
    """Submit ``item`` with a check that holds its group in the committer until the event is set."""
    release, answers = threading.Event(), []

    def held() -> None:
        assert release.wait(30)

    def done(ids, err) -> None:
        answers.append((ids, err))

    led.submit(item.vecs, item.labels, item.texts, done, held)
    return release, answers


def test_a_group_hashed_ahead_stores_the_same_bytes_as_one_hashed_in_its_commit(tmp_path):
    first, second = _item(0), _item(1)
    with DurableLedger.open(tmp_path / "ahead.db", dim=DIM) as led:
        led.extend(first.vecs, first.labels, first.texts)
        release, answers = _submit_held(led, second)  # queued behind the commit that hashes ahead
        assert led._ahead.wait_hashed(30)
        release.set()
        led.close()
        assert led.hashed_ahead == 3 and answers == [(range(3, 6), None)]
        root, size = led.root(), len(led)
    _same_file_by_extend(tmp_path / "plain.db", [first, second])
    assert _tables(tmp_path / "ahead.db") == _tables(tmp_path / "plain.db")
    with DurableLedger.open(tmp_path / "plain.db") as plain:
        assert (plain.root(), len(plain)) == (root, size)


_OTHER_PROCESS = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ocrr.ledger.sqlite.store import DurableLedger
    with DurableLedger.open(sys.argv[1], dim=4) as led:
        led.append(np.full(4, 0.5, np.float32), "other process", "theirs")
    """
)


def test_entries_another_process_appended_in_between_make_the_group_hash_again(tmp_path):
    first, second = _item(0), _item(1)
    path = tmp_path / "ahead.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(first.vecs, first.labels, first.texts)
        release, answers = _submit_held(led, second)
        assert led._ahead.wait_hashed(30)  # hashed as ids 3..5, after entry 2
        subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(path)], check=True, timeout=60)
        release.set()
        led.close()
        assert led.hashed_ahead == 0 and answers == [(range(4, 7), None)]  # hashed again as ids 4..6
    theirs = Pending(np.full((1, DIM), 0.5, np.float32), ["other process"], ["theirs"])
    _same_file_by_extend(tmp_path / "plain.db", [first, theirs, second])
    assert _tables(path) == _tables(tmp_path / "plain.db")
    with DurableLedger.open(path) as reopened:  # full check of chain and tree
        assert len(reopened) == 7
