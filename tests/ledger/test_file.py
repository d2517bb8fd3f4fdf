"""``Ledger.open`` on the one file format: flushed appends survive SIGKILL, one writer per
file is enforced, and files of the old format (and a crash's hot journal in one) still open."""

from __future__ import annotations

import pickle
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from crash_child import label, vec
from old_format import write_old_format

from ocrr.errors import OcrrError
from ocrr.ledger import DurableLedger, Ledger, migrate
from ocrr.ledger.sqlite.scan import scan_file

KILLS = 45


def _reference(n: int) -> Ledger:
    ref = Ledger(4)
    for i in range(n):
        ref.append(vec(i), label(i), f"t{i}" if i % 2 else None)
    return ref


def test_sigkill_while_appending_through_ledger_open_loses_no_flushed_entry(tmp_path):
    """45 times: a process appends and flushes through Ledger.open in a loop and is SIGKILLed
    at a random moment (crash_child.py); after each kill the file reopens with Ledger.open,
    holds every entry whose flush had returned, and its chain verifies."""
    path = tmp_path / "crash.db"
    Ledger.open(path, dim=4).close()
    helper = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("crash_child.py")), str(path), "1", "open"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    acked, checked = -1, 0
    try:
        for _ in range(KILLS):
            helper.stdin.write("go\n")
            helper.stdin.flush()
            acked = max(acked, int(helper.stdout.readline()))
            with Ledger.open(path) as led:  # checks every entry, the chain and the Merkle tree
                assert len(led) > acked and led.verify().ok
                for i in range(checked, len(led)):  # entries before ``checked`` are chained to these
                    assert led[i].label == label(i) and np.array_equal(led[i].vector, vec(i))
                checked = len(led)
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)
    assert acked > 100  # the children really did append
    assert scan_file(path)[0].ok


def test_appends_reach_the_file_on_flush(tmp_path):
    path = tmp_path / "l.db"
    led = Ledger.open(path)
    led.append(vec(0), "a")
    assert scan_file(path)[0].size == 0  # not yet flushed
    led.flush()
    led.flush()  # nothing new: no second commit
    assert scan_file(path)[0].size == 1
    led.extend(np.stack([vec(1), vec(2)]), ["b", "c"], ["x", None])
    with pytest.raises(OcrrError, match="cannot pickle a ledger open on"):
        pickle.dumps(led)
    with pytest.raises(OcrrError, match="this ledger's own file"):
        led.save(path)
    led.close()
    copy = pickle.loads(pickle.dumps(led))  # an in-memory ledger, open for appends
    assert copy.head == led.head
    copy.append(vec(3), "d")
    assert copy.verify().ok
    again = Ledger.load(path)
    assert again.labels == ("a", "b", "c") and again.head == led.head


def test_a_second_writer_is_refused_not_interleaved(tmp_path):
    path = tmp_path / "l.db"
    first, second = Ledger.open(path, dim=4), Ledger.open(path, dim=4)
    first.append(vec(0), "a")
    first.flush()
    second.append(vec(1), "b")
    with pytest.raises(OcrrError, match="another process appended to ledger"):
        second.flush()
    first.close()
    with Ledger.open(path) as led:
        assert led.labels == ("a",) and led.verify().ok


def test_old_format_files_load_and_open_converted_in_place(tmp_path):
    ref = _reference(9)
    old = tmp_path / "old.db"
    write_old_format(old, ref)
    assert Ledger.load(old).head == ref.head  # read as it is, nothing written
    report, _ = scan_file(old)
    assert not report.ok and "ocrr ledger migrate" in report.reason
    with Ledger.open(old) as led:  # checked, then converted
        assert led.head == ref.head
        led.append(vec(9), label(9))
    report, _ = scan_file(old)
    assert report.ok and report.size == 10


def test_a_damaged_old_format_file_is_refused_and_left_alone(tmp_path):
    old = tmp_path / "old.db"
    write_old_format(old, _reference(6))
    with sqlite3.connect(old) as conn:
        conn.execute("UPDATE entries SET label = 'forged' WHERE id = 3")
    before = list(sqlite3.connect(old).iterdump())
    with pytest.raises(OcrrError, match="damaged at entry 3"):
        Ledger.open(old)
    with pytest.raises(OcrrError, match="damaged at entry 3"):
        migrate(old, tmp_path / "new.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.db"]
    with sqlite3.connect(old) as conn:  # not converted
        assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'nodes'").fetchone()
    assert list(sqlite3.connect(old).iterdump()) == before  # the same tables and rows (SQLite may note WAL mode)


_KILLED_OLD_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA cache_size=1")  # spill pages to the file mid-transaction, as a big append did
conn.execute("BEGIN")
for i in range(6, 3000):
    conn.execute("INSERT INTO entries VALUES (?, 'x', NULL, ?, ?, ?)", (i, bytes(16), bytes(32) * 30, bytes(32)))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_old_format_file_with_a_hot_journal_opens_and_migrates(tmp_path):
    """The old format's bug: a writer killed mid-write left a hot journal, and the next
    Ledger.open failed ("attempt to write a readonly database"). Now the write is undone."""
    ref = _reference(6)
    old = tmp_path / "old.db"
    write_old_format(old, ref)
    subprocess.run([sys.executable, "-c", textwrap.dedent(_KILLED_OLD_WRITER), str(old)], check=False)
    assert Path(f"{old}-journal").stat().st_size > 0
    with pytest.raises(OcrrError, match="unfinished write"):
        Ledger.load(old)  # read-only: cannot undo it, says how
    report = migrate(old, tmp_path / "new.db")  # a converted copy; the original stays as it is
    assert report.ok and report.size == 6 and Path(f"{old}-journal").exists()
    assert Ledger.load(tmp_path / "new.db").head == ref.head
    with Ledger.open(old) as led:
        assert len(led) == 6 and led.head == ref.head and led.verify().ok
        led.append(vec(6), label(6))
    assert scan_file(old)[0].size == 7


def test_migrate_refuses_to_overwrite_and_copies_a_current_file(tmp_path):
    ref = _reference(5)
    ref.save(tmp_path / "a.db")
    with pytest.raises(OcrrError, match="already exists"):
        migrate(tmp_path / "a.db", tmp_path / "a.db")
    with pytest.raises(OcrrError, match="does not exist"):
        migrate(tmp_path / "missing.db", tmp_path / "b.db")
    assert migrate(tmp_path / "a.db", tmp_path / "b.db").size == 5
    with DurableLedger.open(tmp_path / "b.db") as led:
        assert led.chain_head == ref.head


def test_refusing_a_file_that_is_not_a_database_leaves_no_descriptor_open(tmp_path):
    """The refused open closes its SQLite connection itself (not left to the garbage collector)."""
    import gc
    import os

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not an SQLite file " * 200)
    gc.collect()
    gc.disable()  # a connection left in a reference cycle would stay open until a collection
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(10):
            with pytest.raises(OcrrError, match="cannot open ledger"):
                DurableLedger.open(junk)
        left = len(os.listdir("/proc/self/fd")) - before
    finally:
        gc.enable()
    assert left == 0, f"{left} descriptors left open by 10 refused opens"
