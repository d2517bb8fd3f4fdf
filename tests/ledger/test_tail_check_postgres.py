# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""The tail check of tests/ledger/test_tail_check.py, on PostgreSQL: rows removed from the
tail or inserted past the head by a superuser who switched the append-only triggers off make
the next append fail closed, naming what changed, and nothing is appended."""

from __future__ import annotations

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import LedgerIntegrityError
from ocrr.ledger.postgres.store import PostgresLedger

DIM = 8


def _vecs(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)  # a durable ledger takes unit rows only


def _tamper(url: str, *statements: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # triggers off for this session
        for sql in statements:
            conn.execute(sql)


def _seqs(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT seq FROM ocrr_entries ORDER BY seq")]


def _copy_of_3_at(seq: int) -> str:
    """SQL that inserts a copy of entry 3 at ``seq``."""
    columns = "label, text, vector, prev_hash, hash, leaf"
    return f"INSERT INTO ocrr_entries SELECT {seq}, {columns} FROM ocrr_entries WHERE seq = 3"


def _refused(led: PostgresLedger, url: str, said: str) -> None:
    before = _seqs(url)
    for _ in range(2):  # and stays refused
        with pytest.raises(LedgerIntegrityError, match=said):
            led.extend(_vecs(2, seed=9), ["x", "y"])
    assert _seqs(url) == before and len(led) == 10


@pytest.fixture
def ledger(pg_url):
    led = PostgresLedger.open(pg_url, gather=0)
    led.extend(_vecs(10), [f"l{i}" for i in range(10)])
    yield led, pg_url
    led.close()


def test_rows_removed_from_the_tail_refuse_the_next_append(ledger):
    led, url = ledger
    _tamper(url, "DELETE FROM ocrr_entries WHERE seq >= 7")
    _refused(led, url, r"entries 7\.\.9 were removed from storage")


def test_a_row_inserted_past_the_head_refuses_the_next_append(ledger):
    led, url = ledger
    _tamper(url, _copy_of_3_at(12))
    _refused(led, url, "a row was inserted at id 12 past the head 10")


def test_a_row_at_the_head_refuses_the_next_append(ledger):
    led, url = ledger
    _tamper(url, _copy_of_3_at(10))
    _refused(led, url, "a row was inserted at id 10 past the head 10")


def test_the_last_entry_rewritten_refuses_the_next_append(ledger):
    led, url = ledger
    _tamper(url, "UPDATE ocrr_entries SET hash = decode(repeat('00', 32), 'hex') WHERE seq = 9")
    _refused(led, url, "entry 9 in storage is not the one this ledger committed")


def _head(url: str) -> tuple:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT size, chain_head, root FROM ocrr_head").fetchone()


@pytest.mark.parametrize(
    "dropping",
    [
        # a trigger that keeps every second entry of an insert out of the table
        "CREATE FUNCTION drop_odd() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN IF NEW.seq % 2 = 1 THEN RETURN NULL; END IF; RETURN NEW; END $$; "
        "CREATE TRIGGER drop_odd BEFORE INSERT ON ocrr_entries FOR EACH ROW EXECUTE FUNCTION drop_odd()",
        # a trigger that keeps the head where it was
        "CREATE FUNCTION keep_head() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; "
        "CREATE TRIGGER keep_head BEFORE UPDATE ON ocrr_head FOR EACH ROW EXECUTE FUNCTION keep_head()",
    ],
    ids=["entries dropped", "head not moved"],
)
def test_an_insert_storage_shortens_commits_nothing_and_fails_closed(ledger, dropping):
    led, url = ledger
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(dropping)
    before, head = _seqs(url), _head(url)
    with pytest.raises(LedgerIntegrityError, match=r"kept [0-9]+ of the 4 entries .*nothing was appended"):
        led.extend(_vecs(4, seed=9), ["a", "b", "c", "d"])
    assert _seqs(url) == before and _head(url) == head and len(led) == 10  # the transaction ended in nothing
    with pytest.raises(LedgerIntegrityError):  # and stays refused
        led.extend(_vecs(1, seed=9), ["a"])
