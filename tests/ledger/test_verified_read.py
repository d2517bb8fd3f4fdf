# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""``read_verified``: rows read back from either engine's storage are checked against what the
ledger holds; an edited, removed or unreadable row is named, never returned."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import LedgerIntegrityError, LedgerStorageError
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.verified_read import read_verified
from ocrr.ledger.verify import entry_bytes, leaf_hash


def _fill(led) -> None:
    rng = np.random.default_rng(0)
    for i in range(12):
        v = rng.standard_normal(8).astype(np.float32)
        led.append(v / np.linalg.norm(v), f"c{i % 3}", None if i % 4 == 0 else f"text {i}")


def _sqlite(path):
    def tamper(sql: str) -> None:
        conn = sqlite3.connect(path)
        conn.execute(sql.replace("seq", "id").replace("ocrr_entries", "entries"))
        conn.commit()
        conn.close()

    return DurableLedger.open(path), tamper


def _postgres(url):
    psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
    from ocrr.ledger.postgres.store import PostgresLedger

    def tamper(sql: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # its append-only triggers off
            conn.execute(sql)

    return PostgresLedger.open(url), tamper


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    """(an open ledger of 12 entries, tamper(sql) that edits its storage behind its back)."""
    if request.param == "sqlite":
        led, tamper = _sqlite(tmp_path / "l.db")
    else:
        led, tamper = _postgres(request.getfixturevalue("pg_url"))
    _fill(led)
    yield led, tamper
    led.close()


def test_intact_rows_come_back_with_their_canonical_bytes(store):
    led, _ = store
    got = read_verified(led, led, 2, 12)
    assert [e.id for e in got] == list(range(2, 12))
    for e in got:
        assert e.bytes == entry_bytes(e.id, e.label, e.text, e.vector, e.prev_hash)
        assert leaf_hash(e.bytes) == led.tree.node(0, e.id)
    assert read_verified(led, led, 5, 5) == []


@pytest.mark.parametrize(
    "sql, first_bad, says",
    [
        ("UPDATE ocrr_entries SET label = 'forged' WHERE seq = 7", 7, "differs from the entry the ledger holds"),
        ("UPDATE ocrr_entries SET text = NULL WHERE seq = 5", 5, "differs"),
        ("UPDATE ocrr_entries SET hash = prev_hash WHERE seq = 9", 9, "differs"),  # the hash column alone
        ("DELETE FROM ocrr_entries WHERE seq = 6", 6, "missing"),
        ("DELETE FROM ocrr_entries WHERE seq = 11", 11, "missing"),  # the last one: no row after it
    ],
)
def test_a_row_changed_in_storage_is_named(store, sql, first_bad, says):
    led, tamper = store
    tamper(sql)
    with pytest.raises(LedgerIntegrityError, match=says) as found:
        read_verified(led, led, 4, 12)
    assert found.value.first_bad == first_bad and f"entry {first_bad}" in str(found.value)


def test_only_what_the_ledger_holds_can_be_asked_for(store):
    led, _ = store
    with pytest.raises(ValueError, match="outside"):
        read_verified(led, led, 10, 13)


def test_storage_that_cannot_be_read_is_a_storage_error_not_damage(tmp_path):
    led, _ = _sqlite(tmp_path / "l.db")
    _fill(led)
    (tmp_path / "l.db").rename(tmp_path / "away.db")
    try:
        with pytest.raises(LedgerStorageError, match=r"entries 0\.\.11 could not be read from storage"):
            read_verified(led, led, 0, 12)
    finally:
        (tmp_path / "away.db").rename(tmp_path / "l.db")
        led.close()
