"""Several processes (or connections) appending to one durable ledger file: the workers
of ``ocrr serve --workers N``. Each commit takes in, checked, what the others committed
first; ``refresh`` takes it in without writing."""

from __future__ import annotations

import base64
import multiprocessing as mp
import sqlite3

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.sqlite.store import DurableLedger, scan_file
from ocrr.systems.substrate.persistent import open_substrate


def _vecs(rng, m, d=8):
    v = rng.normal(size=(m, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _same(a: DurableLedger, b: DurableLedger) -> None:
    assert len(a) == len(b)
    assert a.head() == b.head()
    assert [a.entry_hash(i) for i in range(len(a))] == [b.entry_hash(i) for i in range(len(b))]
    np.testing.assert_array_equal(a.memory.vectors, b.memory.vectors)
    assert a.memory.labels == b.memory.labels


def test_two_writers_on_one_file_keep_one_chain(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    with DurableLedger.open(path, dim=8) as a, DurableLedger.open(path, dim=8) as b:
        assert list(a.extend(_vecs(rng, 3), ["x", "y", "x"])) == [0, 1, 2]
        # b has not looked yet: its commit takes in a's three entries first, then adds its own.
        assert list(b.extend(_vecs(rng, 2), ["z", "z"], ["t1", None])) == [3, 4]
        assert b.followed == 3
        assert a.refresh() == 2 and a.refresh() == 0
        _same(a, b)
        assert a.inclusion_proof(1, 5) == b.inclusion_proof(1, 5)
        assert a.consistency_proof(3, 5) == b.consistency_proof(3, 5)
    report, _ = scan_file(path)
    assert report and report.size == 5
    with DurableLedger.open(path) as c:  # a fresh open agrees with both mirrors
        assert base64.b64encode(c.root()).decode() == report.root == base64.b64encode(a.root()).decode()
        assert c.memory.labels == ("x", "y", "x", "z", "z")


def test_interleaved_appends_and_refreshes_match_a_fresh_open(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(1)
    ledgers = [DurableLedger.open(path, dim=8) for _ in range(3)]
    try:
        for step in range(60):
            who = ledgers[int(rng.integers(3))]
            if rng.random() < 0.3:
                who.refresh()
            else:
                m = int(rng.integers(1, 4))
                ids = who.extend(_vecs(rng, m), [f"c{step}"] * m)
                assert list(ids) == list(range(len(who) - m, len(who)))  # ours are the newest it holds
        for led in ledgers:
            led.refresh()
        with DurableLedger.open(path) as fresh:
            for led in ledgers:
                _same(led, fresh)
                assert led.root() == fresh.root()
    finally:
        for led in ledgers:
            led.close()


def test_refresh_without_changes_is_a_no_op_and_sees_later_commits(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(2)
    with DurableLedger.open(path, dim=8) as a, DurableLedger.open(path, dim=8) as b:
        assert b.refresh() == 0
        a.extend(_vecs(rng, 4), ["p"] * 4)
        a.extend(_vecs(rng, 1), ["q"])
        assert b.refresh() == 5
        assert b.refresh() == 0
        assert b.memory.labels[-1] == "q"


def test_an_entry_that_does_not_chain_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(3)
    with DurableLedger.open(path, dim=8) as a, DurableLedger.open(path, dim=8) as b:
        a.extend(_vecs(rng, 2), ["p", "q"])
        conn = sqlite3.connect(path)
        conn.execute("UPDATE entries SET label = 'forged' WHERE id = 1")  # another writer gone wrong
        conn.commit()
        conn.close()
        with pytest.raises(OcrrError, match="entry 1, written by another process, does not chain.*ledger verify"):
            b.refresh()
        with pytest.raises(OcrrError, match="ledger verify"):  # and it stays refused
            b.extend(_vecs(rng, 1), ["r"])


def test_a_persistent_substrate_answers_for_another_process_corrections(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(4)
    seed = _vecs(rng, 40, 16)
    with open_substrate(path) as a:
        a.correct(seed, [f"c{i % 4}" for i in range(40)])
    with open_substrate(path, verify="checkpoint") as a, open_substrate(path, verify="checkpoint") as b:
        query = _vecs(rng, 1, 16)
        a.correct(np.repeat(query, 5, axis=0), ["new"] * 5)  # acknowledged by a
        assert b.ledger.refresh() == 5
        assert b.predict(query) == ["new"] == a.predict(query)
        assert b.explain(query) == a.explain(query)


def _append_worker(path, k, rounds, out):
    rng = np.random.default_rng(100 + k)
    acked = []
    with DurableLedger.open(path, verify="checkpoint") as led:
        for r in range(rounds):
            m = int(rng.integers(1, 4))
            labels = [f"w{k}-{r}-{j}" for j in range(m)]
            ids = led.extend(_vecs(rng, m), labels)
            acked += list(zip(ids, labels))
    out.put(acked)


def test_processes_appending_at_once_lose_nothing(tmp_path):
    path = tmp_path / "l.db"
    DurableLedger.open(path, dim=8).close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_append_worker, args=(path, k, 40, out)) for k in range(3)]
    for p in procs:
        p.start()
    acked = [a for _ in procs for a in out.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    with DurableLedger.open(path) as led:  # full check of chain and tree
        assert len(led) == len(acked) == len({i for i, _ in acked})
        assert all(led.memory.labels[i] == label for i, label in acked)


def _ack_worker(path, rounds, out):
    rng = np.random.default_rng(7)
    with DurableLedger.open(path, verify="checkpoint") as led:
        for r in range(rounds):
            out.put((led.append(_vecs(rng, 1)[0], f"other-{r}"), f"other-{r}"))
    out.put(None)


def test_every_entry_acknowledged_elsewhere_is_seen_after_refresh_while_this_process_writes(tmp_path):
    """Read-your-writes across processes, under load: another process acknowledges entries one
    by one; right after each acknowledgement this process refreshes and must hold it, while
    a thread of this process keeps committing its own (so refresh meets commits in flight)."""
    import threading

    path = tmp_path / "l.db"
    DurableLedger.open(path, dim=8).close()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    writer = ctx.Process(target=_ack_worker, args=(path, 150, out))
    with DurableLedger.open(path, verify="checkpoint") as led:
        stop = threading.Event()

        def own_commits():
            rng = np.random.default_rng(8)
            while not stop.is_set():
                led.extend(_vecs(rng, 2), ["mine", "mine"])

        mine = threading.Thread(target=own_commits)
        mine.start()
        writer.start()
        try:
            seen = 0
            while (got := out.get(timeout=120)) is not None:
                entry, label = got
                led.refresh()
                assert len(led) > entry and led.memory.labels[entry] == label
                seen += 1
        finally:
            stop.set()
            mine.join()
            writer.join(timeout=60)
        assert seen == 150 and writer.exitcode == 0
    with DurableLedger.open(path) as fresh:  # and the file is one intact chain
        assert fresh.memory.labels.count("mine") == len(fresh) - 150


def test_a_verification_kept_by_one_process_is_the_latest_for_all_even_in_an_older_file(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(3)
    with DurableLedger.open(path, dim=8) as a:
        a.extend(_vecs(rng, 2), ["x", "y"])
    conn = sqlite3.connect(path)  # a file written before the table existed
    conn.execute("DROP TABLE verifications")
    conn.commit()
    conn.close()
    with DurableLedger.open(path) as a, DurableLedger.open(path) as b:
        assert a.last_verification() is None
        first = {**a.verify().to_dict(), "time": 1.0}
        a.record_verification(first)
        assert b.last_verification() == first and first["ok"] and first["size"] == 2
        later = {**b.verify().to_dict(), "time": 2.0}
        b.record_verification(later)
        assert a.last_verification() == later
    with DurableLedger.open(path) as c:  # and after a restart; the kept outcomes are not entries
        assert c.last_verification() == later and len(c) == 2 and scan_file(path)[0]
        for t in range(150):  # only the latest 100 stay: the file does not grow with every call
            c.record_verification({**later, "time": 3.0 + t})
        assert c.last_verification()["time"] == 152.0
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*), MIN(time) FROM verifications").fetchone() == (100, 53.0)
    conn.close()
