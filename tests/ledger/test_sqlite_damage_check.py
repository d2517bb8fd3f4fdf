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


def _forge_record(path, report: object, id_: int | None = None) -> None:
    import json

    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO verifications (id, time, report) VALUES (?, 0, ?)", (id_, json.dumps(report)))
    conn.commit()
    conn.close()


def test_a_record_numbered_from_outside_is_damage_not_a_blind_spot(tmp_path):
    """A record given SQLite's largest id makes SQLite number every later record at random,
    under each process's cursor: damage one worker records would never reach the others.
    Each process reads that record as damage instead, and a gap in the numbering too."""
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led, DurableLedger.open(path) as other:
        led.extend(*rows(3, 0))
        seen = other.damage_since(-1)
        assert seen is not None and seen[1] is None
        _forge_record(path, {"ok": True, "reason": "ok: forged", "time": 0}, 2**63 - 1)
        found = other.damage_since(seen[0])
        assert found is not None and found[1] is not None and found[1]["ok"] is False
        assert "the largest SQLite has" in found[1]["reason"]
        assert led.damage_since(-1)[1] is not None  # a process started after the forgery too
    gap = tmp_path / "gap.db"
    with DurableLedger.open(gap, dim=DIM) as led:
        led.record_verification({"ok": True, "reason": "ok", "time": 0})
        _forge_record(gap, {"ok": True, "reason": "ok: forged", "time": 0}, 50)
        found = led.damage_since(1)
        assert found is not None and found[1] is not None
        assert "numbered 1..50 but there are 2" in found[1]["reason"]


def test_the_latest_record_is_served_only_as_a_report(tmp_path):
    """``last_verification`` reads a record storage holds: one that is no JSON object is
    reported as unreadable, never raised (it is served by /corrections/recent)."""
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.record_verification({"ok": True, "reason": "ok", "time": 0})
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO verifications (time, report) VALUES (0, 'not json {')")
        conn.commit()
        conn.close()
        assert led.last_verification() == {"ok": False, "reason": "a verification record in the file is unreadable"}
        _forge_record(path, [1, 2])
        assert led.last_verification() == {"ok": False, "reason": "a bad verification record in the file"}
