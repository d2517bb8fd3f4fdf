"""On SQLite, as on PostgreSQL, the appenders' check for damage another process recorded runs
inside the group commit's write transaction, answered from the statement that reads the
stored tail: no statement (and no wait for the file's watching connection) of its own, and
damage recorded before the commit still fails the append."""

from __future__ import annotations

import sqlite3

from tests.ledger.damage_appender import DIM, Appender, damage_by_another_fails_the_next_append, rows

from ocrr.ledger.sqlite.store import DurableLedger


def test_the_damage_check_and_the_size_cost_no_statement_of_their_own(tmp_path):
    with DurableLedger.open(tmp_path / "l.db", dim=DIM) as led:
        appender = Appender(led)
        appender.append(0)  # the committer thread is running
        statements: list[str] = []
        led._conn.set_trace_callback(statements.append)
        led._watch.set_trace_callback(lambda sql: statements.append(f"watch: {sql}"))
        ids, err = appender.append(1)
        assert err is None and ids == range(3, 6)
        assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
        assert not [s for s in statements if s.startswith("watch:") or "verifications WHERE" in s]
        assert sum(s.startswith("SELECT") for s in statements) == 1  # the tail, the size and the latest record


def test_damage_recorded_by_another_process_fails_the_next_append(tmp_path):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led, DurableLedger.open(path) as other:
        damage_by_another_fails_the_next_append(led, other)


def test_entries_another_process_committed_are_taken_in_before_the_commit(tmp_path):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led, DurableLedger.open(path) as other:
        appender = Appender(led)
        assert appender.append(0)[1] is None
        other.extend(*rows(2, 7))
        ids, err = appender.append(1)
        assert err is None and ids == range(5, 8)
        other.refresh()
        assert led.head() == other.head()  # one chain: ours went after theirs


def test_a_file_from_before_verification_records_gets_their_table_and_appends(tmp_path):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(*rows(3, 0))
        head = led.head()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE verifications")
    conn.commit()
    conn.close()
    with DurableLedger.open(path) as led:
        assert led.head() == head
        appender = Appender(led)
        ids, err = appender.append(1)
        assert err is None and ids == range(3, 6)
        assert led.damage_since(-1) == (-1, None)
