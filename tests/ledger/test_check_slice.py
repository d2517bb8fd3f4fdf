"""``check_slice``: the background check's rehash of stored entries against the held chain,
read and rehashed a step at a time with a rest between steps. Any step size finds the same
first bad entry as reading the slice at once, on SQLite and on PostgreSQL."""

# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments

from __future__ import annotations

import sqlite3

import pytest
from tests.ledger.damage_appender import DIM, rows
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.ledger.sqlite import store as sqlite_store
from ocrr.ledger.sqlite.store import DurableLedger

STEPS = (0, 1, 2, 3, 5, 50)


def _file(tmp_path):
    path = tmp_path / "l.db"
    led = DurableLedger.open(path, dim=DIM)
    led.extend(*rows(12, 0))
    return led, path


def _edit(path, sql: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute(sql).rowcount == 1
    conn.close()


def test_an_intact_slice_passes_at_any_step(tmp_path):
    led, _ = _file(tmp_path)
    with led:
        for step in STEPS:
            assert led.check_slice(0, 12, step=step) is None
            assert led.check_slice(4, 9, step=step) is None


@pytest.mark.parametrize(
    "sql, bad",
    [
        ("UPDATE entries SET label = 'forged' WHERE id = 7", 7),
        ("DELETE FROM entries WHERE id = 5", 5),
        ("UPDATE entries SET id = 40 WHERE id = 11", 11),
    ],
)
def test_every_step_size_names_the_same_first_bad_entry(tmp_path, sql, bad):
    led, path = _file(tmp_path)
    with led:
        _edit(path, sql)
        found = {step: led.check_slice(0, 12, step=step) for step in STEPS}
        assert {f[0] for f in found.values() if f is not None} == {bad}, found
        assert all(f is not None for f in found.values())
        assert led.check_slice(0, bad, step=2) is None  # the entries before it are intact


def test_rests_come_between_steps_and_one_that_says_stop_ends_the_check(tmp_path, monkeypatch):
    led, path = _file(tmp_path)
    opened = []
    real = sqlite_store.connect
    monkeypatch.setattr(sqlite_store, "connect", lambda *a, **k: opened.append(1) or real(*a, **k))
    with led:
        rests: list[float] = []
        assert led.check_slice(0, 12, step=5, rest=lambda took: rests.append(took) or False) is None
        assert len(rests) == 2 and all(took >= 0 for took in rests)  # steps 0-4, 5-9, 10-11
        assert len(opened) == 1  # one read connection for the whole slice
        _edit(path, "UPDATE entries SET label = 'forged' WHERE id = 7")
        assert led.check_slice(0, 12, step=5, rest=lambda took: True) is None  # stopped before entry 7
        assert led.check_slice(0, 12, step=5, rest=lambda took: False)[0] == 7


def test_postgres_steps_name_the_same_entry(pg_url):
    from tests.ledger.test_postgres import _tamper

    from ocrr.ledger.postgres.store import PostgresLedger

    with PostgresLedger.open(pg_url) as pg:
        pg.extend(*rows(12, 0))
        for step in STEPS:
            assert pg.check_slice(0, 12, step=step) is None
        _tamper(pg_url, "UPDATE ocrr_entries SET label = 'forged' WHERE seq = 7")
        assert {pg.check_slice(0, 12, step=step)[0] for step in STEPS} == {7}
        rests: list[float] = []
        assert pg.check_slice(0, 12, step=4, rest=lambda took: rests.append(took) or True) is None
        assert len(rests) == 1
