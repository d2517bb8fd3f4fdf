"""Before every append the stored tail must be what the ledger holds: rows removed from the
tail, a row inserted past the head, or the last entry edited behind a running ledger's back
make the append fail closed (``LedgerIntegrityError`` naming what changed), and nothing is
appended or acknowledged, then or later."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ocrr.errors import LedgerIntegrityError
from ocrr.ledger.sqlite.scan import scan_file
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 8


def _vecs(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)  # a durable ledger takes unit rows only


def _tamper(path, *statements: tuple) -> None:
    """Edit the file with plain sqlite3, as someone with write access to it would."""
    conn = sqlite3.connect(path)
    for sql, *params in statements:
        conn.execute(sql, *params)
    conn.commit()
    conn.close()


def _rows(path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM entries ORDER BY id")]
    finally:
        conn.close()


def _refused(led: DurableLedger, path, said: str) -> None:
    """The next appends are refused with ``said``, and nothing reaches the file."""
    before = _rows(path)
    for _ in range(2):  # and stays refused: the ledger fails closed
        with pytest.raises(LedgerIntegrityError, match=said):
            led.extend(_vecs(2, seed=9), ["x", "y"])
    assert _rows(path) == before
    assert len(led) == 10


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "l.db"
    led = DurableLedger.open(path)
    led.extend(_vecs(10), [f"l{i}" for i in range(10)])
    yield led, path
    led.close()


def test_rows_removed_from_the_tail_refuse_the_next_append(ledger):
    led, path = ledger
    _tamper(path, ("DELETE FROM entries WHERE id >= 7",))
    _refused(led, path, r"entries 7\.\.9 were removed from storage")


def test_a_consistent_truncation_of_rows_and_head_refuses_the_next_append(ledger):
    led, path = ledger
    conn = sqlite3.connect(path)
    head = conn.execute("SELECT hash FROM entries WHERE id = 6").fetchone()[0]
    conn.close()
    _tamper(
        path,
        ("DELETE FROM entries WHERE id >= 7",),
        ("DELETE FROM nodes WHERE level = 0 AND idx >= 7",),
        ("UPDATE meta SET value = 7 WHERE key = 'size'",),
        ("UPDATE meta SET value = ? WHERE key = 'chain_head'", (head,)),
    )
    _refused(led, path, r"entries 7\.\.9 were removed from storage")


def test_a_row_inserted_past_the_head_refuses_the_next_append(ledger):
    led, path = ledger
    _tamper(path, ("INSERT INTO entries SELECT 12, label, text, vector, prev_hash, hash FROM entries WHERE id = 3",))
    _refused(led, path, "a row was inserted at id 12 past the head 10")


def test_a_row_at_the_head_refuses_the_next_append(ledger):
    led, path = ledger
    _tamper(path, ("INSERT INTO entries SELECT 10, label, text, vector, prev_hash, hash FROM entries WHERE id = 3",))
    _refused(led, path, "a row was inserted at id 10 past the head 10")


def test_the_last_entry_rewritten_refuses_the_next_append(ledger):
    led, path = ledger
    _tamper(path, ("UPDATE entries SET hash = zeroblob(32) WHERE id = 9",))
    _refused(led, path, "entry 9 in storage is not the one this ledger committed")


def test_the_recorded_chain_head_rewritten_refuses_the_next_append(ledger):
    led, path = ledger
    _tamper(path, ("UPDATE meta SET value = zeroblob(32) WHERE key = 'chain_head'",))
    _refused(led, path, "chain head storage records is not the one this ledger holds")


def test_an_honest_file_still_takes_appends_and_other_writers_entries(tmp_path):
    path = tmp_path / "l.db"
    with DurableLedger.open(path) as a, DurableLedger.open(path) as b:
        a.extend(_vecs(3), ["a"] * 3)
        b.extend(_vecs(2, seed=1), ["b"] * 2)  # takes a's in first, then its own pass the check
        a.extend(_vecs(1, seed=2), ["a"])
        b.refresh()
        assert len(a) == len(b) == 6 and a.head() == b.head()
    assert scan_file(path)[0].ok
