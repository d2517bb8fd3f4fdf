"""A group commit's entries and tree nodes go into SQLite as a few values that SQLite slices
(``ocrr.ledger.sqlite.inserts``): what is stored is exactly the rows those values describe,
row by row, whatever the labels and texts hold (NUL, any script, none), the group's size, or
how many statements it is split into."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.errors import OcrrError
from ocrr.ledger.group_commit import Pending
from ocrr.ledger.hashed_ahead import hash_items
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite import inserts
from ocrr.ledger.sqlite.schema import create_tables

DIM = 3
_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)  # any character but lone surrogates


def _file() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    create_tables(conn, DIM)
    return conn


def _items(groups: list[list[tuple[str, str | None]]], seed: int) -> list[Pending]:
    rng = np.random.default_rng(seed)
    return [
        Pending(rng.standard_normal((len(g), DIM)).astype(np.float32), [label for label, _ in g], [t for _, t in g])
        for g in groups
    ]


def _rows_one_by_one(items: list[Pending], hashed) -> list[tuple]:
    """The rows as binding each value would store them."""
    out, n, prev = [], hashed.start, hashed.prev
    for p in items:
        for j, (label, text) in enumerate(zip(p.labels, p.texts)):
            digest = hashed.digests[n - hashed.start]
            out.append((n, label, text, p.vecs[j].astype("<f4").tobytes(), prev, digest))
            n, prev = n + 1, digest
    return out


_STORED = "SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id"


@settings(max_examples=80, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.tuples(_text.filter(bool), st.none() | _text), min_size=1, max_size=4), min_size=1, max_size=4
    ),
    start=st.integers(0, 2**40),
    statement_bytes=st.sampled_from([inserts.STATEMENT_BYTES, DIM * 4, 2 * DIM * 4, 5 * DIM * 4]),
    seed=st.integers(0, 3),
)
def test_entries_stored_are_the_rows_the_hashes_cover(groups, start, statement_bytes, seed):
    items = _items(groups, seed)
    hashed = hash_items(items, start, bytes([seed]) * 32)
    conn = _file()
    with pytest.MonkeyPatch.context() as mp:  # (a function-scoped fixture would span every example)
        mp.setattr(inserts, "STATEMENT_BYTES", statement_bytes)
        inserts.insert_entries(conn, hashed)
    stored = conn.execute(_STORED).fetchall()
    assert stored == _rows_one_by_one(items, hashed)
    kinds = conn.execute("SELECT DISTINCT typeof(label), typeof(vector), typeof(hash) FROM entries").fetchall()
    assert kinds == [("text", "blob", "blob")]
    texts = [t for _, t in sum(groups, [])]
    assert conn.execute("SELECT typeof(text) FROM entries ORDER BY id").fetchall() == [
        ("null" if t is None else "text",) for t in texts
    ]


def test_nul_and_other_scripts_are_stored_whole():
    items = _items([[("a\x00b", "x\x00"), ("é😀", ""), ('\u2028\\"', None)]], seed=1)
    conn = _file()
    inserts.insert_entries(conn, hash_items(items, 0, b"\0" * 32))
    assert conn.execute("SELECT label, text FROM entries ORDER BY id").fetchall() == [
        ("a\x00b", "x\x00"),
        ("é😀", ""),
        ('\u2028\\"', None),
    ]


@pytest.mark.parametrize("statement_bytes", [inserts.STATEMENT_BYTES, 32, 96, 32 * 100])
@pytest.mark.parametrize("start,count", [(0, 1), (0, 700), (1, 1), (63, 2), (255, 189), (300, 471)])
def test_nodes_stored_are_the_nodes_appending_completes(start, count, statement_bytes, monkeypatch):
    monkeypatch.setattr(inserts, "STATEMENT_BYTES", statement_bytes)
    leaves = [bytes([k % 251]) * 31 + bytes([k // 251]) for k in range(start + count)]
    one_by_one, together = MerkleTree(), MerkleTree()
    for leaf in leaves[:start]:
        one_by_one.append(leaf)
    together.extend(leaves[:start])
    expected = sorted(node for leaf in leaves[start:] for node in one_by_one.append(leaf))
    conn = _file()
    inserts.insert_nodes(conn, together.extend(leaves[start:]))
    assert conn.execute("SELECT level, idx, hash FROM nodes ORDER BY level, idx").fetchall() == expected


def test_a_failed_row_fails_its_statement_and_stores_nothing_of_it():
    conn = _file()
    items = _items([[("a", None)] * 5], seed=0)
    inserts.insert_entries(conn, hash_items(items, 0, b"\0" * 32))
    with pytest.raises(sqlite3.IntegrityError):
        inserts.insert_entries(conn, hash_items(_items([[("b", None)] * 3], seed=1), 4, b"\0" * 32))  # id 4 is taken
    assert conn.execute("SELECT count(*), max(id) FROM entries").fetchone() == (5, 4)


def test_a_library_without_json_functions_is_refused_naming_the_fix():
    conn = sqlite3.connect(":memory:")
    # SQLite's own authorizer refuses json_each, as a library built without it would
    conn.set_authorizer(lambda action, table, *_: sqlite3.SQLITE_DENY if table == "json_each" else sqlite3.SQLITE_OK)
    with pytest.raises(OcrrError, match=r"has no JSON functions .*use a Python whose SQLite is 3\.38 or newer"):
        inserts.check_json_functions(conn)
    inserts.check_json_functions(sqlite3.connect(":memory:"))  # this library has them
