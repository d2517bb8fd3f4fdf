"""A group commit's entries and tree nodes written to SQLite as a few values each, which
SQLite slices itself.

Bound row by row, a group of a few hundred entries is thousands of parameters, each bound
by the committing thread while it holds the interpreter lock (which the service's event
loop needs too). Here every statement binds a handful of values: the vectors as one blob
of equal-width rows, the previous and own chain hashes as one blob (``Hashed.chain``), the
labels and texts as one blob of UTF-8 with each one's place given in JSON, the nodes as one
blob per run of them (rows counted off a JSON array of zeros). SQLite slices them (``substr``
on a blob counts bytes) while the lock is let go.
Places are given as offsets, not the strings as JSON, because SQLite's JSON functions end a
string at an escaped NUL, which a label or text may hold.
"""

from __future__ import annotations

import functools
import json
import sqlite3

from ocrr.errors import OcrrError
from ocrr.ledger.hashed_ahead import Hashed
from ocrr.ledger.verify import HASH_SIZE

__all__ = ["check_json_functions", "insert_entries", "insert_nodes"]

# Bytes of vectors (or of nodes' hashes) per statement at most: a bulk append of millions of
# rows goes in several, each far below SQLite's largest value (SQLITE_MAX_LENGTH, 1e9 bytes).
STATEMENT_BYTES = 1 << 25

# ?1 first id, ?2 labels and texts (UTF-8, back to back), ?3 vectors, ?4 a vector's bytes,
# ?5 chain hashes (the previous entry's, then each entry's), ?6 JSON: per entry
# [where its label starts in ?2, the label's length, the text's length or null (no text)].
_INSERT_ENTRIES = (
    "INSERT INTO entries SELECT ?1 + key, "
    "CAST(substr(?2, json_extract(value, '$[0]') + 1, json_extract(value, '$[1]')) AS TEXT), "
    "CAST(substr(?2, json_extract(value, '$[0]') + json_extract(value, '$[1]') + 1, json_extract(value, '$[2]')) "
    "AS TEXT), substr(?3, key * ?4 + 1, ?4), substr(?5, key * 32 + 1, 32), substr(?5, key * 32 + 33, 32) "
    "FROM json_each(?6)"
)


@functools.lru_cache(maxsize=64)
def _insert_nodes_sql(runs: int) -> str:
    """An INSERT of ``runs`` runs of nodes: ?1 a JSON array at least as long as the longest run
    (rows to count with); then per run its level, first index, hashes joined and node count."""
    each = (
        f"SELECT ?{4 * k + 2}, ?{4 * k + 3} + key, substr(?{4 * k + 4}, key * 32 + 1, 32) FROM json_each(?1) "
        f"WHERE key < ?{4 * k + 5}"
        for k in range(runs)
    )
    return "INSERT INTO nodes " + " UNION ALL ".join(each)


@functools.lru_cache(maxsize=8)
def _counter(n: int) -> str:
    """A JSON array of ``n`` zeros: ``json_each`` over it gives the keys 0 .. n - 1."""
    return "[" + ",".join(["0"] * n) + "]"


def insert_entries(conn: sqlite3.Connection, hashed: Hashed) -> None:
    """INSERT ``hashed``'s entries (ids from ``hashed.start``), in statements of at most
    ``STATEMENT_BYTES`` of vectors."""
    count = len(hashed.digests)
    if not count:
        return
    width = len(hashed.vectors[0]) // len(hashed.items[0].labels)
    per = max(1, STATEMENT_BYTES // width)
    with memoryview(b"".join(hashed.vectors)) as vectors, memoryview(hashed.chain()) as chain:
        for lo in range(0, count, per):
            hi = min(count, lo + per)
            strings: list[bytes] = []
            places: list[tuple[int, int, int | None]] = []
            at = 0
            for label, text in zip(hashed.labels[lo:hi], hashed.texts[lo:hi]):
                strings.append(label)
                if text is None:
                    places.append((at, len(label), None))
                    at += len(label)
                else:
                    strings.append(text)
                    places.append((at, len(label), len(text)))
                    at += len(label) + len(text)
            conn.execute(
                _INSERT_ENTRIES,
                (
                    hashed.start + lo,
                    b"".join(strings),
                    vectors[lo * width : hi * width],
                    width,
                    chain[lo * HASH_SIZE : (hi + 1) * HASH_SIZE],
                    json.dumps(places),
                ),
            )


def insert_nodes(conn: sqlite3.Connection, runs: list[tuple[int, int, bytes]]) -> None:
    """INSERT the tree nodes of ``runs`` (``MerkleTree.extend``: level, first index, hashes
    joined), in statements of at most ``STATEMENT_BYTES`` of hashes."""
    pieces = [
        (level, lo + start // HASH_SIZE, run[start : start + STATEMENT_BYTES])
        for level, lo, run in runs
        for start in range(0, len(run), STATEMENT_BYTES)
    ]
    batch: list[tuple[int, int, bytes]] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece[2])
        if size >= STATEMENT_BYTES or piece is pieces[-1]:
            longest = max(len(hashes) for _, _, hashes in batch) // HASH_SIZE
            params: list[object] = [_counter(-(-longest // 64) * 64)]  # a few lengths: each made once
            for level, lo, hashes in batch:
                params += [level, lo, hashes, len(hashes) // HASH_SIZE]
            conn.execute(_insert_nodes_sql(len(batch)), params)
            batch, size = [], 0


def check_json_functions(conn: sqlite3.Connection) -> None:
    """Raise the error naming the fix when this SQLite library has no JSON functions, which
    the inserts above need (built in since SQLite 3.38; most builds had them before)."""
    try:
        conn.execute("SELECT key FROM json_each('[0]')").fetchall()
    except sqlite3.DatabaseError as e:  # no such table (or refused: an authorizer)
        raise OcrrError(
            f"this Python's SQLite library ({sqlite3.sqlite_version}) has no JSON functions ({e}), which the "
            f"ledger writes with; use a Python whose SQLite is 3.38 or newer, or one built with JSON1"
        ) from None
