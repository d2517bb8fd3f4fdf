"""The bare engine loop the durable benchmarks measure the ledger against.

A plain SQLite insert loop with the ledger's durability (WAL, synchronous=FULL): rows as big as
a ledger entry's, ``per_commit`` of them per transaction, for ``seconds``, one thread. Used by
``bench_service.py`` and ``bench_durable.py``, so both measure against the same limit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

# make_rows(n, prev, count) -> (rows, prev after them): ``count`` chained rows from entry ``n``
MakeRows = Callable[[int, bytes, int], tuple[list[tuple], bytes]]


def bare_sqlite_loop(folder: Path, make_rows: MakeRows, per_commit: int, seconds: float) -> tuple[float, float]:
    """(rows/s, commits/s) of the loop, in a new database under ``folder``."""
    path = folder / f"bare-{per_commit}-{time.monotonic_ns()}.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE entries (id INTEGER PRIMARY KEY, label TEXT, text TEXT, vector BLOB, prev BLOB, hash BLOB)"
        )
        n = commits = 0
        prev = b"\0" * 32
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            rows, prev = make_rows(n, prev, per_commit)
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")  # fsynced: WAL with synchronous=FULL
            n += per_commit
            commits += 1
        wall = time.perf_counter() - t0
    finally:
        conn.close()
    return n / wall, commits / wall
