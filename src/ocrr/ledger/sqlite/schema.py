"""The ledger file's tables, the connection to it, and the conversion of old files.

An SQLite file with these tables (docs/ledger.md describes them):

* ``entries``: one row per entry, exactly as ``Ledger`` stores them;
* ``nodes``: every complete Merkle subtree hash (level, index, hash), leaves included;
* ``meta``: format, dim, and the size and chain head of the last commit;
* ``checkpoints``: (size, chain head, root, time, signed note) of every successful full
  verification by a ledger with a signing key (``ocrr.ledger.checkpoint_records``);
* ``verifications``: the latest outcomes of ``/verify`` asked of a service (kept, not checked).

``create_tables`` makes them, ``adopt_v1`` converts a file of the old format (``meta`` and
``entries`` only) in place, ``add_note_column`` gives an older ``checkpoints`` table its
note, ``connect`` opens the file.
"""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Iterable
from pathlib import Path

from ocrr.ledger.chain import GENESIS
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import ProofError, entry_bytes, leaf_hash

__all__ = [
    "FORMAT",
    "VERIFICATIONS_TABLE",
    "VERSION",
    "add_note_column",
    "add_tree",
    "adopt_v1",
    "connect",
    "create_tables",
    "has_note_column",
]

FORMAT, VERSION = "ocrr-ledger", 1

# Outcomes of verifications asked of a running service (kept, not checked: they vouch for nothing).
VERIFICATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS verifications (id INTEGER PRIMARY KEY, time REAL NOT NULL, report TEXT NOT NULL)"
)
_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, label TEXT NOT NULL, text TEXT, "
    "vector BLOB NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, "
    "PRIMARY KEY (level, idx)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, chain_head BLOB NOT NULL, "
    "root BLOB NOT NULL, time REAL NOT NULL, note TEXT)",
    VERIFICATIONS_TABLE,
)


def create_tables(conn: sqlite3.Connection, dim: int | None) -> None:
    """Create the tables inside the caller's transaction (executescript would commit it)."""
    for statement in _TABLES:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR IGNORE INTO meta VALUES (?, ?)",
        [
            ("format", FORMAT),
            ("version", VERSION),
            ("dim", dim),
            ("size", 0),
            ("chain_head", GENESIS),
            ("durable", 1),
        ],
    )


def add_note_column(conn: sqlite3.Connection) -> None:
    """Give the checkpoints table of a file from before signed checkpoint records its ``note``
    column, inside the caller's transaction (its rows keep a NULL note: unauthenticated)."""
    if not has_note_column(conn):
        conn.execute("ALTER TABLE checkpoints ADD COLUMN note TEXT")


def has_note_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "note" for row in conn.execute("PRAGMA table_info(checkpoints)"))


def adopt_v1(conn: sqlite3.Connection) -> None:
    """Convert a file of the old format (tables ``meta`` and ``entries`` only, written by the
    old ``Ledger.save`` / ``Ledger.open``) in place, inside the caller's transaction: add the
    other tables, the Merkle nodes and the commit record. Leaves come from the stored fields,
    so the scan that follows still compares every entry with its stored hash and link; the
    caller rolls back if it fails."""
    for statement in _TABLES:
        conn.execute(statement)
    add_tree(conn, conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id"))


def add_tree(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """Store the Merkle nodes over ``rows`` (the entries table's rows, in id order) and the
    commit record (size, chain head), inside the caller's transaction."""
    tree, nodes, last, n = MerkleTree(), [], GENESIS, 0
    for id_, label, text, vec, prev, digest in rows:
        try:
            pre = entry_bytes(id_, label, text, vec, prev)
        except (TypeError, AttributeError, ProofError, struct.error):
            pre = b""  # a malformed row: the scan names it
        nodes.extend(tree.append(leaf_hash(pre)))
        last, n = digest, n + 1
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [("size", n), ("chain_head", last), ("durable", 1)])


def connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    """A connection to the ledger file: read-only, or in WAL mode with ``synchronous=FULL``
    (acknowledged = on disk) and explicit transactions."""
    if readonly:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
        _schema_readable(conn)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)  # explicit BEGIN/COMMIT
        _schema_readable(conn)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # WAL fsync on every commit: acknowledged = on disk
        except sqlite3.Error:
            conn.close()  # (not a database, or not writable): the caller says so; the file stays closed
            raise
    return conn


def _schema_readable(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError (closing ``conn``) when SQLite's error about the file's
    schema is not even text: damaged schema bytes end up in its message, which Python's
    sqlite3 then fails to decode (a UnicodeDecodeError that callers expecting SQLite's
    errors would let through). Any other error is left to the caller's next statement."""
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error:
        pass
    except UnicodeDecodeError:
        conn.close()
        raise sqlite3.DatabaseError(
            "its schema is damaged: SQLite's message about it is not text, so bytes of its first page were destroyed"
        ) from None
