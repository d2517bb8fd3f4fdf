"""A group commit's rows go into SQLite through statements of a few fixed sizes (padded,
the padding left out), so their compiled form is reused from commit to commit; what is
stored is exactly the rows given, in order, whatever their count and the library's limit."""

from __future__ import annotations

import sqlite3

import pytest

from ocrr.ledger.sqlite.store import _ROWS_STEP, _insert_rows


class _Recording(sqlite3.Connection):
    """A real connection that keeps the text of every statement it is given (before binding)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.statements: list[str] = []

    def execute(self, sql, *args):
        self.statements.append(sql)
        return super().execute(sql, *args)


def _table(limit: int | None = None) -> _Recording:
    conn = sqlite3.connect(":memory:", isolation_level=None, factory=_Recording)
    conn.execute(
        "CREATE TABLE nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, "
        "PRIMARY KEY (level, idx))"
    )
    if limit is not None:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    conn.statements.clear()
    return conn


def _rows(n: int, start: int = 0) -> list[tuple]:
    return [(k % 3, k, bytes([k % 256]) * 32) for k in range(start, start + n)]


@pytest.mark.parametrize("limit", [None, 999, 30, 3])
@pytest.mark.parametrize("n", [1, _ROWS_STEP - 1, _ROWS_STEP, _ROWS_STEP + 1, 3 * _ROWS_STEP + 17, 1500])
def test_the_rows_stored_are_the_rows_given_in_order(n, limit):
    conn = _table(limit)
    rows = _rows(n)
    _insert_rows(conn, "nodes", rows)
    assert conn.execute("SELECT level, idx, hash FROM nodes ORDER BY rowid").fetchall() == rows


def test_groups_of_many_sizes_share_a_few_statement_texts():
    conn = _table()
    start = 0
    for n in range(1, 700, 7):
        _insert_rows(conn, "nodes", _rows(n, start))
        start += n
    inserts = [s for s in conn.statements if s.startswith("INSERT")]
    assert len(inserts) == len(range(1, 700, 7))  # one statement per group: these fit in one
    assert len(set(inserts)) <= -(-700 // _ROWS_STEP)  # a text per multiple of the step
    assert conn.execute("SELECT count(*), sum(idx) FROM nodes").fetchone() == (start, sum(range(start)))


def test_a_failed_row_fails_the_statement_and_stores_nothing_of_it():
    conn = _table()
    _insert_rows(conn, "nodes", _rows(5))
    with pytest.raises(sqlite3.IntegrityError):
        _insert_rows(conn, "nodes", _rows(3, 4))  # (1, 4) is stored already
    assert conn.execute("SELECT count(*) FROM nodes").fetchone()[0] == 5


def test_no_rows_no_statement():
    conn = _table()
    _insert_rows(conn, "nodes", [])
    assert conn.statements == []
