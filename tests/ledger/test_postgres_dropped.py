# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""A PostgreSQL ledger dropped without ``close()`` closes its pool itself, from whichever thread
the garbage collector finds it on (one of the pool's own threads included, which cannot join
itself): no unraisable exception, its connections gone from the server, every acknowledged
entry kept."""

from __future__ import annotations

import gc
import secrets
import sys
import threading
import time
import weakref

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401
from tests.ledger.submitted import submit_rows

from ocrr.ledger.postgres.store import PostgresLedger

DIM = 4


@pytest.fixture
def unraisable(monkeypatch) -> list:
    """What reaches ``sys.unraisablehook`` (a ``__del__`` or finalizer that raised) or
    ``threading.excepthook`` (a thread that died of an exception) during the test."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    monkeypatch.setattr(threading, "excepthook", seen.append)
    return seen


def _named(url: str) -> tuple[str, str]:
    """``url`` with an application_name of its own (to find its connections in
    pg_stat_activity), and that name."""
    name = f"ocrr-dropped-{secrets.token_hex(4)}"
    return f"{url}{'&' if '?' in url else '?'}application_name={name}", name


def _connections(url: str, name: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()[0]


def _wait_gone(url: str, name: str) -> int:
    """The server's count of the named connections, once it is 0 (or after 10 s)."""
    deadline = time.monotonic() + 10
    while (left := _connections(url, name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _join_new(before: set[threading.Thread]) -> None:
    """Every thread started since ``before`` (the committer's, the pool's, the close's) ends."""
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)
        assert not thread.is_alive(), thread.name


class _Collect:
    """A task for the pool's workers: a garbage collection, on that worker's thread, once let go."""

    def __init__(self):
        self.go, self.done = threading.Event(), threading.Event()

    def run(self) -> None:
        self.go.wait(30)
        try:
            gc.collect()
        finally:
            self.done.set()


def test_a_ledger_collected_on_its_pools_own_thread_closes_the_pool(pg_url, unraisable):
    url, name = _named(pg_url)
    before = set(threading.enumerate())
    led = PostgresLedger.open(url, dim=DIM)
    told, done = submit_rows(led, 6, DIM)
    assert done.wait(30)
    assert sorted(ids.start for ids, err in told if err is None) == list(range(6))
    led.extend(np.eye(DIM, dtype=np.float32)[:2], ["x", "y"])  # the kept connection in use too
    assert _connections(pg_url, name) >= 1
    collect = _Collect()
    pool = led._pool
    pool.run_task(collect)  # a worker now waits in it
    del pool
    gone = weakref.ref(led)
    gc.disable()  # the ledger (in a cycle of its own) is found by the worker's collection, not here
    try:
        del led
        collect.go.set()
        assert collect.done.wait(30)
    finally:
        gc.enable()
    assert gone() is None
    assert _wait_gone(pg_url, name) == 0
    _join_new(before)
    gc.collect()
    assert unraisable == []
    with PostgresLedger.open(pg_url) as again:  # everything acknowledged is there
        assert len(again) == 8 and again.verify().ok


def test_a_ledger_dropped_on_another_thread_with_appends_queued_closes_its_pool(pg_url, unraisable):
    url, name = _named(pg_url)
    before = set(threading.enumerate())
    outcome: dict = {}
    ready = threading.Event()

    def append_and_drop() -> None:
        led = PostgresLedger.open(url, dim=DIM)
        outcome["told"], outcome["done"] = submit_rows(led, 5, DIM)  # queued: the committer holds the ledger
        outcome["gone"] = weakref.ref(led)
        ready.set()
        del led
        outcome["done"].wait(30)
        gc.collect()  # collected here, once its committer let it go

    thread = threading.Thread(target=append_and_drop, name="dropper")
    thread.start()
    assert ready.wait(30)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert outcome["done"].is_set()
    assert sorted(ids.start for ids, err in outcome["told"] if err is None) == list(range(5))
    gc.collect()
    assert outcome["gone"]() is None
    assert _wait_gone(pg_url, name) == 0
    _join_new(before)
    gc.collect()
    assert unraisable == []
    with PostgresLedger.open(pg_url) as again:
        assert len(again) == 5 and again.verify().ok


def test_closing_explicitly_twice_then_dropping_leaves_nothing(pg_url, unraisable):
    url, name = _named(pg_url)
    before = set(threading.enumerate())
    led = PostgresLedger.open(url, dim=DIM)
    told, done = submit_rows(led, 3, DIM)
    assert done.wait(30)
    led.append(np.full(DIM, DIM**-0.5, np.float32), "z")  # a durable ledger takes unit rows only
    led.close()
    assert _connections(pg_url, name) == 0  # closed by close() itself, not later
    led.close()  # idempotent
    gone = weakref.ref(led)
    del led
    gc.collect()
    assert gone() is None
    _join_new(before)
    assert unraisable == []
    with PostgresLedger.open(pg_url) as again:
        assert len(again) == 4 and again.verify().ok
