"""Files of the old ledger format, written with sqlite3 directly (as the old ``Ledger.save``
did, before the durable store): tables ``meta`` (format, version, dim) and ``entries`` only,
rollback journal. The migration tests need them; ocrr itself no longer writes them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

OLD_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY,
    label TEXT NOT NULL,
    text TEXT,
    vector BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
"""


def write_old_format(path: str | Path, ledger) -> None:
    """Write ``ledger`` (an ``ocrr.ledger.Ledger``) to ``path`` in the old format."""
    conn = sqlite3.connect(path)
    try:
        conn.executescript(OLD_SCHEMA)
        conn.executemany(
            "INSERT INTO meta VALUES (?, ?)", [("format", "ocrr-ledger"), ("version", 1), ("dim", ledger.dim)]
        )
        conn.executemany(
            "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)",
            [(e.id, e.label, e.text, e.vector.astype("<f4").tobytes(), e.prev_hash, e.hash) for e in ledger],
        )
        conn.commit()
    finally:
        conn.close()
