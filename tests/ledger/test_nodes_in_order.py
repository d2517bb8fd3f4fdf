"""``NodesInOrder`` reads the stored Merkle nodes a level at a time, in the order a check asks
for them: every answer, and the first node no entry accounts for, are those of the whole
table read into a dict first (what the check did before), for stored nodes missing, edited,
added between or after the tree's, below the first entry checked, or at levels the tree never
reaches."""

from __future__ import annotations

import hashlib
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite.nodes_in_order import NodesInOrder


def _leaf(i: int) -> bytes:
    return hashlib.sha256(i.to_bytes(8, "little")).digest()


def _table(nodes: dict) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, "
        "PRIMARY KEY (level, idx)) WITHOUT ROWID"
    )
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", [(lv, k, h) for (lv, k), h in nodes.items()])
    return conn


@st.composite
def _cases(draw):
    n = draw(st.integers(1, 70))
    first = draw(st.integers(0, n - 1))
    tree, nodes = MerkleTree(), {}
    for i in range(n):
        for level, k, h in tree.append(_leaf(i)):
            nodes[(level, k)] = h
    keys = sorted(nodes)
    for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
        del nodes[key]  # missing
    for key in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)):
        if key in nodes:
            nodes[key] = bytes(32)  # edited
    extra = st.tuples(st.integers(0, 9), st.integers(0, 2 * n + 3))
    for key in draw(st.lists(extra, max_size=5, unique=True)):
        nodes.setdefault(key, b"\x01" * 32)  # added: between, after, or at a level no entry reaches
    return n, first, nodes, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_answers_as_the_whole_table_read_first(case):
    n, first, nodes, leaves_asked_first = case
    stored = {(lv, k): h for (lv, k), h in nodes.items() if k >= first >> lv}  # the dict the check held
    streamed = NodesInOrder(_table(nodes), first)
    tree = MerkleTree()
    for i in range(first):
        tree.append(_leaf(i))
    for i in range(first, n):
        if leaves_asked_first:  # (an entry taken on trust: its stored leaf is asked for first)
            assert streamed.at(0, i) == stored.get((0, i))
        for level, k, _ in tree.append(_leaf(i)):
            assert streamed.at(level, k) == stored.pop((level, k), None)
    assert streamed.extra() == (min(stored) if stored else None)


def test_an_intact_table_has_no_extra_node_and_one_added_is_named():
    tree, nodes = MerkleTree(), {}
    for i in range(13):
        for level, k, h in tree.append(_leaf(i)):
            nodes[(level, k)] = h

    def extra_after_asking(table: dict, first: int):
        streamed, t = NodesInOrder(_table(table), first), MerkleTree()
        for i in range(13):
            for level, k, h in t.append(_leaf(i)):
                if i >= first:
                    assert streamed.at(level, k) == h
        return streamed.extra()

    assert extra_after_asking(nodes, 0) is None and extra_after_asking(nodes, 5) is None
    assert extra_after_asking({**nodes, (2, 3): b"x" * 32}, 0) == (2, 3)  # after the level's last
    assert extra_after_asking({**nodes, (7, 0): b"x" * 32}, 5) == (7, 0)  # a level never reached
