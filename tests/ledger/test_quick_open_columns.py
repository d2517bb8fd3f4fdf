"""A quick open reads the entries a signed checkpoint vouches for a block of rows at a time
(``ocrr.ledger.sqlite.prefix``) and builds their Merkle tree a level at a time
(``MerkleTree.from_leaves``); the substrate then takes the store's checked hashes instead of
rehashing (``Substrate.fit_checked``). Each must give what the row-by-row way gives: the same
columns, tree, head, root and proofs, the same report naming the same entry when the file was
edited, and the same answers."""

from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocrr.batch import Batch
from ocrr.index.int8_shortlist import Int8Shortlist
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite import prefix as sqlite_prefix
from ocrr.ledger.sqlite import scan as sqlite_scan
from ocrr.ledger.sqlite.schema import connect
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.substrate.core import Substrate
from ocrr.systems.substrate.persistent import open_substrate
from ocrr.utils.grow_ahead import due

ORIGIN = "example.com/quick-open"
N = 300  # entries under the signed checkpoint
DIM = 8


def unit_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """A ledger of N entries (some without text) under a signed checkpoint, then 5 more
    entries after it; read in blocks of 64 rows so that the prefix spans several blocks, and
    its stored tree 16 nodes per read, so that a level spans several reads."""
    monkeypatch.setattr(sqlite_prefix, "_PREFIX_BLOCK", 64)
    monkeypatch.setattr(sqlite_prefix, "_NODES_PER_READ", 16)
    signer = Signer.generate(ORIGIN)
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        texts = [None if i % 7 == 0 else f"item {i}" for i in range(N)]
        led.extend(unit_rows(N, 0), [f"c{i % 5}" for i in range(N)], texts)
    with DurableLedger.open(path, signer=signer):  # a full check: records the signed checkpoint
        pass
    with DurableLedger.open(path) as led:
        led.extend(unit_rows(5, 1), ["c1"] * 5, ["later"] * 5)
    return path, signer


def scans(path, signer):
    """(column-wise scan, row-by-row scan) of the file, each trusting the signed checkpoint."""
    conn = connect(path, readonly=True)
    try:
        conn.execute("BEGIN")
        out = []
        for fast in (True, False):
            try:
                out.append(sqlite_scan._scan(conn, 0, (signer.vkey,), fast=fast))
            except sqlite_scan.Damage as d:
                out.append((d.first_bad, d.reason))
            except sqlite3.Error as e:  # (report_of reports it as damaged tables)
                out.append((None, str(e)))
        return out
    finally:
        conn.close()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 300])
def test_a_tree_built_from_its_leaves_is_the_tree_built_by_appending_them(n):
    leaves = [hashlib.sha256(str(i).encode()).digest() for i in range(n)]
    appended = MerkleTree()
    for leaf in leaves:
        appended.append(leaf)
    built = MerkleTree.from_leaves(b"".join(leaves))
    assert [bytes(level) for level in built.levels] == [bytes(level) for level in appended.levels]
    if n:
        assert built.inclusion_proof(n // 2) == appended.inclusion_proof(n // 2)
        assert built.consistency_proof(max(1, n // 3)) == appended.consistency_proof(max(1, n // 3))


def test_the_column_wise_scan_reads_what_the_row_by_row_scan_reads(signed):
    path, signer = signed
    conn = connect(path, readonly=True)
    try:  # the intact prefix is read column-wise, not handed to the row-by-row reading
        assert sqlite_prefix.trusted_prefix(conn, N, DIM, np.empty((N, DIM), np.float32)) is not None
    finally:
        conn.close()
    fast, slow = scans(path, signer)
    assert fast.checked_from == slow.checked_from == N
    assert fast.labels == slow.labels and fast.texts == slow.texts and fast.hashes == slow.hashes
    assert np.array_equal(fast.vectors, slow.vectors)
    assert [bytes(level) for level in fast.tree.levels] == [bytes(level) for level in slow.tree.levels]


def test_blocks_fetched_by_their_own_readers_come_in_order_as_the_callers_connection_reads_them(signed):
    path, _ = signed
    blocks = [(lo, min(lo + 64, N)) for lo in range(0, N, 64)]
    conn = connect(path, readonly=True)
    try:
        alone = [conn.execute(sqlite_prefix._ENTRIES_BLOCK, (DIM * 4, lo, hi)).fetchone() for lo, hi in blocks]
        with sqlite_prefix._BlockReaders(conn, DIM) as readers:
            assert len(readers.own) == readers.READERS  # the file opened again: readers of their own
            assert list(readers.fetch(blocks)) == alone
    finally:
        conn.close()
    memory = sqlite3.connect(":memory:")  # nothing to open again: the caller's connection reads
    memory.execute("CREATE TABLE entries (id, label, text, vector, prev_hash, hash)")
    with sqlite_prefix._BlockReaders(memory, DIM) as readers:
        assert readers.own == [] and [row[0] for row in readers.fetch([(0, 5)])] == [0]


def test_texts_and_labels_of_any_kind_are_read_column_wise_as_row_by_row(signed):
    """Texts removed, empty, or holding separators and other scripts, in the trusted prefix
    (which a quick open does not rehash): both readings give the same columns."""
    path, signer = signed
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE entries SET text = NULL WHERE id IN (1, 64, 299)")
        conn.execute("UPDATE entries SET text = '' WHERE id IN (0, 2, 7)")
        conn.execute("UPDATE entries SET text = 'a,b' || char(10) || 'é€😀' WHERE id = 3")
        conn.execute("UPDATE entries SET label = 'ü,' WHERE id = 4")
    conn.close()
    fast, slow = scans(path, signer)
    assert fast.texts == slow.texts and fast.labels == slow.labels
    assert fast.texts[1] is None and fast.texts[0] == "" and fast.texts[3] == "a,b\né€😀" and fast.labels[4] == "ü,"


def test_a_nul_in_a_label_reads_the_block_row_by_row_with_the_same_columns(signed):
    path, signer = signed
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE entries SET label = 'a' || char(0) || 'b', text = char(0) WHERE id = 5")
    conn.close()
    reader = connect(path, readonly=True)
    try:
        assert sqlite_prefix.trusted_prefix(reader, N, DIM, np.empty((N, DIM), np.float32)) is None
    finally:
        reader.close()
    fast, slow = scans(path, signer)
    assert fast.labels == slow.labels and fast.texts == slow.texts and fast.labels[5] == "a\0b"


def test_a_quick_open_gives_the_full_checks_head_root_and_proofs(signed):
    path, signer = signed
    with DurableLedger.open(path, verify="checkpoint", signer=signer) as quick:
        assert quick.report.checked_from == N
        quick_head = quick.head()
        proofs = [quick.inclusion_proof(i) for i in (0, 63, 64, N - 1, N + 2)]
        consistency = quick.consistency_proof(N - 1)
    with DurableLedger.open(path, verify="full") as full:
        assert quick_head == full.head()
        assert proofs == [full.inclusion_proof(i) for i in (0, 63, 64, N - 1, N + 2)]
        assert consistency == full.consistency_proof(N - 1)


EDITS = {
    "a label stored as bytes": "UPDATE entries SET label = CAST(label AS BLOB) WHERE id = 70",
    "a label that is not UTF-8": "UPDATE entries SET label = CAST(x'ff00' AS TEXT) WHERE id = 70",
    "a vector cut short": "UPDATE entries SET vector = substr(vector, 1, 16) WHERE id = 130",
    "a broken link": "UPDATE entries SET prev_hash = zeroblob(32) WHERE id = 65",
    "a missing entry": "DELETE FROM entries WHERE id = 200",
    "a missing leaf": "DELETE FROM nodes WHERE level = 0 AND idx = 10",
    "a missing leaf, first of a read": "DELETE FROM nodes WHERE level = 0 AND idx = 32",
    "an inner node of a later read edited": "UPDATE nodes SET hash = zeroblob(32) WHERE level = 1 AND idx = 47",
    "an edited inner node": "UPDATE nodes SET hash = zeroblob(32) WHERE level = 3 AND idx = 4",
    "an extra node": "INSERT INTO nodes VALUES (2, 5000, zeroblob(32))",
    "a hash of another length": "UPDATE entries SET hash = x'00' WHERE id = 5",
    "a vector stored as text of its bytes": "UPDATE entries SET vector = CAST(vector AS TEXT) WHERE id = 90",
    "a hash stored as text": "UPDATE entries SET hash = CAST(hash AS TEXT) WHERE id = 90",
    "a link stored as text": "UPDATE entries SET prev_hash = CAST(prev_hash AS TEXT) WHERE id = 91",
    "a text stored as bytes": "UPDATE entries SET text = CAST(text AS BLOB) WHERE id = 92",
    "a text that is not UTF-8": "UPDATE entries SET text = CAST(x'c328' AS TEXT) WHERE id = 93",
    "two entries' ids swapped": "UPDATE entries SET id = -id - 1 WHERE id IN (100, 101); "
    "UPDATE entries SET id = CASE id WHEN -101 THEN 101 ELSE 100 END WHERE id < 0",
    "a leaf of another length": "UPDATE nodes SET hash = x'00' WHERE level = 0 AND idx = 12",
    "an inner node of another length": "UPDATE nodes SET hash = x'00' WHERE level = 1 AND idx = 40",
    "an inner node missing": "DELETE FROM nodes WHERE level = 2 AND idx = 7",
    "an extra leaf": "INSERT INTO nodes VALUES (0, 100000, zeroblob(32))",
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edit_before_the_checkpoint_is_reported_as_the_row_by_row_scan_reports_it(signed, edit):
    path, signer = signed
    conn = sqlite3.connect(path)
    with conn:
        for statement in EDITS[edit].split("; "):
            conn.execute(statement)
    conn.close()
    fast, slow = scans(path, signer)
    assert isinstance(slow, tuple), "the edit is one a quick open finds"
    assert fast == slow


def test_a_substrate_fitted_on_checked_hashes_is_the_substrate_fitted_by_rehashing(signed):
    path, signer = signed
    queries = unit_rows(40, 2)
    with open_substrate(path, verify="checkpoint", signer=signer) as opened:
        took = opened.system.ledger_
        with DurableLedger.open(path, verify="full") as led:
            mirror = led.memory
            rehashed = Substrate().fit(Batch(mirror.vectors, list(mirror._texts), list(mirror.labels)))
        assert took.head == rehashed.ledger_.head == opened.ledger.chain_head
        assert took._hashes == rehashed.ledger_._hashes and took._prev == rehashed.ledger_._prev
        assert took.verify().ok
        assert opened.predict(queries) == rehashed.predict(Batch(queries, None, None))
        # and both go on alike: a correction, then the same answers and head
        opened.correct(queries[:3], ["new"] * 3, ["fix"] * 3)
        rehashed.correct(Batch(queries[:3], ["fix"] * 3, ["new"] * 3))
        assert took.head == rehashed.ledger_.head == opened.ledger.chain_head
        assert opened.predict(queries) == rehashed.predict(Batch(queries, None, None))


def test_the_substrate_takes_the_scans_buffer_instead_of_copying_it(signed):
    path, signer = signed
    with open_substrate(path, verify="checkpoint", signer=signer) as opened:
        ledger = opened.system.ledger_
        assert ledger.vector_buffer_bytes == 448 * DIM * 4  # the scan's: a quarter free (305 rows held)
        before = ledger.vectors.copy()
        opened.correct(unit_rows(300, 3), ["grow"] * 300, ["t"] * 300)  # past the buffer: it grows
        assert np.array_equal(ledger.vectors[: len(before)], before) and len(ledger) == N + 5 + 300
        assert ledger.verify().ok


@pytest.mark.parametrize("rows", [1, 47, 48, 49, 100, 768, 769, 1_000_000])
def test_the_rows_an_open_reads_leave_a_quarter_of_their_buffer_free(rows):
    """So that an opened ledger's buffer is not grown ahead (from three quarters full) at once:
    at a million entries that was a second buffer of twice the rows, filled in the background;
    and not much more than a quarter, since the free rows are backed in the background too."""
    buffer = sqlite_scan._row_buffer(rows, 2).base
    capacity = buffer.shape[0]
    assert capacity >= 64 and capacity % 64 == 0
    assert 4 * rows < 3 * capacity <= 4 * rows + 3 * 64 + 3  # a quarter free, and not much more
    assert not due(rows, capacity, 1 << 40)  # whatever its size


def test_a_shortlists_first_pass_leaves_a_quarter_of_its_buffer_free_and_later_rows_double_it():
    """The same for the 8-bit copy a service's pooled predicts scan."""
    rows = unit_rows(2689, 4)
    shortlist = Int8Shortlist(DIM)
    shortlist.catch_up(rows[:2000])
    assert len(shortlist._codes) == 2688 and not due(2000, 2688, 1 << 40)  # 2000 * 4/3, in rows of 64
    shortlist.catch_up(rows[:2688])  # into the room left
    assert len(shortlist._codes) == 2688 and len(shortlist) == 2688
    shortlist.catch_up(rows)  # one past it: doubled, as before
    assert len(shortlist._codes) == 2 * 2688 and len(shortlist) == 2689


@pytest.mark.parametrize("verify", ["checkpoint", "full"])
def test_a_check_for_its_report_gives_the_same_report_without_holding_the_rows(signed, verify):
    """The service's background check (every --check-every seconds in each worker) and
    verify() want the report only: at a million entries the rows are gigabytes."""
    path, signer = signed
    kept_report, kept = sqlite_scan.scan_file(path, verify, (signer.vkey,))
    report, bare = sqlite_scan.scan_file(path, verify, (signer.vkey,), rows=False)
    assert report == kept_report and report.ok
    assert bare.hashes == kept.hashes and bare.tree.root() == kept.tree.root()
    assert len(bare.vectors) == 0 and bare.labels == [] and bare.texts == []
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            EDITS["a broken link"] if verify == "checkpoint" else "UPDATE entries SET label = 'x' WHERE id = 3"
        )
    conn.close()
    assert (
        sqlite_scan.scan_file(path, verify, (signer.vkey,), rows=False)[0]
        == sqlite_scan.scan_file(path, verify, (signer.vkey,))[0]
    )


HOLDINGS_EDITS = {
    "intact": [],
    "the last entries removed": ["DELETE FROM entries WHERE id >= 290"],
    "an entry removed": ["DELETE FROM entries WHERE id = 120"],
    "an entry with a negative id": [
        "INSERT INTO entries SELECT -5, label, text, vector, prev_hash, hash FROM entries WHERE id = 3"
    ],
    "an entry far past the end": [
        "INSERT INTO entries SELECT 10000000, label, text, vector, prev_hash, hash FROM entries WHERE id = 3"
    ],
    "a dim too large for the file": ["UPDATE meta SET value = 1000 WHERE key = 'dim'"],
    "a dim too large, an entry removed": [
        "UPDATE meta SET value = 1000 WHERE key = 'dim'",
        "DELETE FROM entries WHERE id = 7",
    ],
    "no entries left": ["DELETE FROM entries"],
}


@pytest.mark.parametrize("edit", sorted(HOLDINGS_EDITS))
def test_rows_made_room_for_from_the_ids_ends_give_what_counting_them_gives(signed, edit, monkeypatch):
    """The room for the rows is sized from the table's largest id, not by counting every row
    (``_held_at_most``): each open (and each report of a damaged file) is as with the count."""
    path, signer = signed
    conn = sqlite3.connect(path)
    with conn:
        for statement in HOLDINGS_EDITS[edit]:
            conn.execute(statement)
    conn.close()
    bounded = [scans(path, signer)]
    monkeypatch.setattr(sqlite_scan, "_held_at_most", lambda c: c.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
    counted = [scans(path, signer)]
    for got, want in zip(bounded[0], counted[0]):
        if isinstance(want, tuple):
            assert got == want
        else:
            assert got.labels == want.labels and got.hashes == want.hashes
            assert np.array_equal(got.vectors, want.vectors)


@given(st.integers(0, 10**13), st.integers(0, 3000))
@settings(max_examples=300, deadline=None)
def test_the_ids_a_block_must_list_are_pythons_own_join_of_them(lo, count):
    assert sqlite_prefix._ids(lo, lo + count) == ",".join(map(str, range(lo, lo + count)))


@pytest.mark.parametrize("lo, hi", [(0, 0), (5, 5), (7, 3), (0, 1), (9, 11), (99_990, 100_010), (0, (1 << 20) + 17)])
def test_the_ids_across_a_power_of_ten_and_a_chunk_are_pythons_own_join(lo, hi):
    assert sqlite_prefix._ids(lo, hi) == ",".join(map(str, range(lo, hi)))


def test_the_column_wise_reading_notes_that_the_rows_it_read_obey_their_rules(signed, tmp_path):
    """Its readers check each block's rows as ``check_rows`` would (the open then skips them);
    the row-by-row reading checks no rules, and leaves every row to the open."""
    path, signer = signed
    fast, slow = scans(path, signer)
    assert fast.rows_checked == N and slow.rows_checked == 0
    conn = connect(path, readonly=True)
    try:
        assert sqlite_prefix.trusted_prefix(conn, N, DIM, np.empty((N, DIM), np.float32))[4] is True
        assert sqlite_prefix.trusted_prefix(conn, N, DIM, None)[4] is False  # rows not kept: not checked
    finally:
        conn.close()
