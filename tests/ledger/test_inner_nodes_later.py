"""A quick open whose holder compares the stored inner Merkle nodes after the open
(``KnownPrefix.inner_nodes_later``: ``ocrr serve --workers N``) reads the same entries, and
``StoredInnerNodes`` then names an edited, missing or mis-sized inner node exactly as the
row-by-row reading names it; every other edit is still found at the open."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from tests.ledger.test_quick_open_columns import DIM, EDITS, N, scans, signed  # noqa: F401 - the fixture

from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite import inner_nodes as sqlite_inner_nodes
from ocrr.ledger.sqlite import scan as sqlite_scan
from ocrr.ledger.sqlite.inner_nodes import StoredInnerNodes
from ocrr.ledger.sqlite.scan import KnownPrefix
from ocrr.ledger.sqlite.schema import connect

INNER = {
    "an edited inner node",
    "an inner node of another length",
    "an inner node missing",
    "an inner node of a later read edited",
}


def scan_leaving_inner_nodes(path, signer):
    """The column-wise scan of the file trusting its signed checkpoint, as the supervisor of
    ``ocrr serve --workers N`` reads it: (first bad, reason) when it finds damage."""
    known = KnownPrefix(
        0,
        np.zeros((N + 16, DIM), np.float32),
        LabelColumn(),
        TextColumn(),
        HashColumn(),
        MerkleTree(),
        inner_nodes_later=True,
    )
    conn = connect(path, readonly=True)
    try:
        conn.execute("BEGIN")
        return sqlite_scan._scan(conn, 0, (signer.vkey,), known=known)
    except sqlite_scan.Damage as d:
        return d.first_bad, d.reason
    except sqlite3.Error as e:  # (as ``scans`` gives it)
        return None, str(e)
    finally:
        conn.close()


def first_found(nodes: StoredInnerNodes):
    return next((bad for bad in (nodes.first_mismatch(*s) for s in nodes.slices()) if bad is not None), None)


def edit(path, what: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for statement in EDITS[what].split("; "):
            conn.execute(statement)
    conn.close()


@pytest.mark.parametrize("slice_nodes", [1, 5, 1000])
def test_an_intact_files_inner_nodes_all_match_in_slices_that_cover_each_once(signed, slice_nodes, monkeypatch):  # noqa: F811
    monkeypatch.setattr(sqlite_inner_nodes, "SLICE", slice_nodes)
    path, signer = signed
    got = scan_leaving_inner_nodes(path, signer)
    nodes = StoredInnerNodes(path, got.tree.levels, N)
    covered = [(level, k) for level, lo, hi in nodes.slices() for k in range(lo, hi)]
    assert len(covered) == len(set(covered)) == nodes.count == sum(N >> level for level in range(1, 9))
    assert {level for level, _ in covered} == set(range(1, 9))  # N = 300 < 2**9
    assert first_found(nodes) is None


@pytest.mark.parametrize("what", sorted(INNER))
def test_an_inner_node_edit_is_left_to_the_later_comparison_which_names_it_as_the_row_by_row_scan(signed, what):  # noqa: F811
    path, signer = signed
    edit(path, what)
    _, slow = scans(path, signer)
    assert isinstance(slow, tuple), "the row-by-row reading finds it"
    got = scan_leaving_inner_nodes(path, signer)
    assert isinstance(got, sqlite_scan.Scan), "the open leaves it to the comparison"
    assert first_found(StoredInnerNodes(path, got.tree.levels, N)) == slow


@pytest.mark.parametrize("what", sorted(set(EDITS) - INNER))
def test_every_other_edit_is_still_found_at_the_open(signed, what):  # noqa: F811
    path, signer = signed
    edit(path, what)
    fast, slow = scans(path, signer)
    assert scan_leaving_inner_nodes(path, signer) == slow == fast


def test_a_file_that_cannot_be_read_is_named_not_taken_for_intact(signed, tmp_path):  # noqa: F811
    path, signer = signed
    got = scan_leaving_inner_nodes(path, signer)
    nodes = StoredInnerNodes(path, got.tree.levels, N)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE nodes")
    conn.close()
    first, reason = first_found(nodes)
    assert first == 0 and "could not be read" in reason
