"""The durable ledger: appends survive reopening and SIGKILL, concurrent appends share
commits, a reopened file is checked (fully or from its checkpoint), bad input is refused."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger import Ledger
from ocrr.ledger.heads import Signer
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.sqlite.store import DurableLedger, scan_file
from ocrr.ledger.verify import entry_leaf_hash, verify_consistency, verify_inclusion

DIM = 4


def _vec(i: int) -> np.ndarray:
    v = np.random.default_rng(i).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)  # a durable ledger takes unit rows only


def _label(i: int) -> str:
    return f"label-{i % 7}"


def test_appends_survive_reopening_and_match_an_in_memory_ledger(tmp_path):
    path = tmp_path / "l.db"
    ref = Ledger(DIM)
    with DurableLedger.open(path) as led:
        for i in range(20):
            assert led.append(_vec(i), _label(i), None if i % 2 else f"text {i}") == i
            ref.append(_vec(i), _label(i), None if i % 2 else f"text {i}")
        ids = led.extend(np.stack([_vec(i) for i in range(20, 25)]), [_label(i) for i in range(20, 25)])
        ref.extend(np.stack([_vec(i) for i in range(20, 25)]), [_label(i) for i in range(20, 25)])
        assert list(ids) == list(range(20, 25))
        root = led.root()
    with DurableLedger.open(path) as led:
        assert len(led) == 25 and led.chain_head == ref.head and led.root() == root
        assert led.memory.head == ref.head and np.array_equal(led.memory.vectors, ref.vectors)
    assert Ledger.load(path).head == ref.head  # still readable as a plain ledger file


def _stored(path: Path) -> dict:
    """Every table of the log as stored (rows in key order)."""
    conn = sqlite3.connect(path)
    try:
        return {
            "entries": conn.execute("SELECT * FROM entries ORDER BY id").fetchall(),
            "nodes": conn.execute("SELECT * FROM nodes ORDER BY level, idx").fetchall(),
            "meta": conn.execute("SELECT * FROM meta ORDER BY key").fetchall(),
        }
    finally:
        conn.close()


def test_groups_of_any_size_store_what_one_at_a_time_stores(tmp_path):
    """The group commit's row making (one pass over a group's bytes) is exactly the entry-by-entry
    one: the same entries, tree nodes and head in the file, and the same roots and proofs, as
    appending one at a time and as the in-memory ledger; a Unicode text and a missing one too."""
    n = 300
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    labels = [_label(i) for i in range(n)]
    texts = [None if i % 3 else f"texte {i} é✓" for i in range(n)]
    ref = Ledger(DIM)  # the chain hashed by the in-memory ledger, the tree by the verifier's leaf hash
    ref.extend(vecs, labels, texts)
    tree = MerkleTree()
    for i in range(n):
        e = ref[i]
        tree.append(entry_leaf_hash(i, e.label, e.text, e.vector.astype("<f4").tobytes(), e.prev_hash))
    with DurableLedger.open(tmp_path / "one.db") as one:
        for i in range(n):
            one.append(vecs[i], labels[i], texts[i])
    with DurableLedger.open(tmp_path / "groups.db") as groups:
        lo = 0
        for size in (1, 2, 5, 64, 128, 100):  # 300 in all
            groups.extend(vecs[lo : lo + size], labels[lo : lo + size], texts[lo : lo + size])
            lo += size
        assert groups.head() == (n, tree.root(), ref.head)
        assert [groups.entry_hash(i) for i in range(n)] == [ref[i].hash for i in range(n)]
        assert [groups.inclusion_proof(i, n) for i in range(n)] == [tree.inclusion_proof(i, n) for i in range(n)]
    assert _stored(tmp_path / "groups.db") == _stored(tmp_path / "one.db")


def test_proofs_from_a_durable_ledger_verify_with_the_standalone_verifier(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:
        for i in range(13):
            led.append(_vec(i), _label(i))
        old_root = led.root(5)
        for i, row in enumerate(led.read_entries()):
            leaf = entry_leaf_hash(row[0], row[1], row[2], row[3], row[4])
            verify_inclusion(i, 13, leaf, led.tree.inclusion_proof(i), led.root())
        verify_consistency(5, 13, led.tree.consistency_proof(5), old_root, led.root())


def test_concurrent_appends_are_group_committed(tmp_path):
    with DurableLedger.open(tmp_path / "l.db") as led:

        def worker(k):
            for j in range(40):
                led.append(_vec(1000 * k + j), f"w{k}")

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(led) == 320
        assert led.commits < 320  # some commits carried several appends
        assert led.verify().ok and led.memory.verify().ok


def test_checkpoint_open_rehashes_only_the_tail(tmp_path):
    path = tmp_path / "l.db"
    signer = Signer.generate("example.com/durable-test")  # only signed checkpoint records are trusted
    with DurableLedger.open(path, signer=signer) as led:
        for i in range(10):
            led.append(_vec(i), _label(i))
        assert led.verify().ok  # signed checkpoint record at 10
        for i in range(10, 15):
            led.append(_vec(i), _label(i))
    report, _ = scan_file(path, "checkpoint", (signer.vkey,))
    assert report.ok and report.checked_from == 10
    # A label edited before the checkpoint (hash column left alone) escapes the quick
    # check but not the full one; after the checkpoint it is caught either way.
    conn = sqlite3.connect(path)
    conn.execute("UPDATE entries SET label = 'forged' WHERE id IN (3, 12)")
    conn.commit()
    conn.close()
    quick, _ = scan_file(path, "checkpoint", (signer.vkey,))
    assert not quick.ok and quick.first_bad == 12
    with pytest.raises(OcrrError, match="damaged at entry 3"):
        DurableLedger.open(path)


@pytest.mark.parametrize(
    "bad, match",
    [(np.array([np.nan, 0, 0, 0]), "NaN"), (np.zeros(3), "dimension 3"), ("abc", "numeric")],
)
def test_bad_appends_get_one_clear_error_and_change_nothing(tmp_path, bad, match):
    with DurableLedger.open(tmp_path / "l.db") as led:
        led.append(_vec(0), "a")
        with pytest.raises(OcrrError, match=match):
            led.append(bad, "a")
        with pytest.raises(OcrrError, match="label"):
            led.append(_vec(1), "")
        assert len(led) == 1 and led.verify().ok


def test_open_refuses_what_is_not_a_ledger(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(OcrrError, match="cannot open ledger"):
        DurableLedger.open(junk)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(OcrrError, match="not an ocrr ledger"):
        DurableLedger.open(other)
    with pytest.raises(OcrrError, match="does not exist"):
        DurableLedger.open(tmp_path / "no" / "such.db")
    with pytest.raises(OcrrError, match="dimension 4, not 5"):
        with DurableLedger.open(tmp_path / "l.db") as led:
            led.append(_vec(0), "a")
        DurableLedger.open(tmp_path / "l.db", dim=5)


def test_sigkill_loses_no_acknowledged_entry(tmp_path):
    """55 times: a process appends in a loop and is SIGKILLed at a random moment (see
    tests/crash_child.py); after each kill, every acknowledged entry is there, and the
    chain and the tree verify on reopening."""
    from crash_child import label, vec

    path = tmp_path / "crash.db"
    DurableLedger.open(path).close()
    helper = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("crash_child.py")), str(path), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked, checked = -1, 0
    try:
        for _ in range(55):
            helper.stdin.write("go\n")
            helper.stdin.flush()
            acked = max(acked, int(helper.stdout.readline()))
            with DurableLedger.open(path) as led:  # full check: refuses a broken chain or tree
                assert len(led) > acked
                mem = led.memory
                for i in range(checked, len(led)):  # entries before ``checked`` are chained to these
                    assert mem[i].label == label(i) and np.array_equal(mem[i].vector, vec(i))
                checked = len(led)
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)
    assert acked > 100  # the children really did append


def test_an_old_format_file_is_adopted_and_a_damaged_one_left_alone(tmp_path):
    from old_format import write_old_format

    ref = Ledger(DIM)
    for i in range(9):
        ref.append(_vec(i), _label(i), f"t{i}")
    write_old_format(tmp_path / "plain.db", ref)
    with DurableLedger.open(tmp_path / "plain.db") as led:
        assert len(led) == 9 and led.chain_head == ref.head
        led.append(_vec(9), _label(9))
    with DurableLedger.open(tmp_path / "plain.db") as again:
        assert again.report.size == 10
    write_old_format(tmp_path / "bad.db", ref)
    conn = sqlite3.connect(tmp_path / "bad.db")
    conn.execute("UPDATE entries SET label = 'forged' WHERE id = 5")
    conn.commit()
    conn.close()
    with pytest.raises(OcrrError, match="damaged at entry 5"):
        DurableLedger.open(tmp_path / "bad.db")
    conn = sqlite3.connect(tmp_path / "bad.db")
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'nodes'").fetchone()
