"""``ocrr serve --workers N``: the supervisor's checked entries, handed to the workers in shared
memory (``service/shared_rows.py``). A worker built from them holds what a worker that reads
the file holds, answers the same, reads only the entries committed after the supervisor's
read, and never writes into the shared rows."""

from __future__ import annotations

import mmap
import pickle

import numpy as np
import pytest

from ocrr.ledger.chain import APPENDABLE
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.service import shared_rows
from ocrr.systems.substrate.persistent import open_checked, open_substrate

pytestmark = pytest.mark.skipif(not shared_rows.available(), reason="shared rows need Linux's memfd")

DIM, ENTRIES = 16, 6_000


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _texts(lo: int, hi: int) -> list[str | None]:
    return [None if i % 7 == 0 else f"ütterance {i} ✓" * (i % 3) for i in range(lo, hi)]


@pytest.fixture
def ledger(tmp_path):
    rng = np.random.default_rng(54)
    centres = _unit(rng.normal(size=(40, DIM)))
    classes = rng.integers(len(centres), size=ENTRIES)
    vecs = _unit(centres[classes] + rng.normal(0, 0.2, (ENTRIES, DIM)))
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(vecs, [f"c{c}" for c in classes.tolist()], _texts(0, ENTRIES))
    return path, centres, rng


def _published(path, read_into_shared_memory: bool = True):
    """What the supervisor of ``ocrr serve --workers N`` hands its workers: the rows read
    straight into the memory they share (``RowsRoom``), or copied there."""
    room = shared_rows.room_for_rows(path) if read_into_shared_memory else None
    supervisor = open_checked(path, verify="checkpoint", known=None if room is None else room.known_prefix())
    try:
        if room is not None:
            assert room.holds(supervisor.ledger.memory.vectors)  # read into it: no second copy
        return shared_rows.publish(supervisor, room)
    finally:
        supervisor.close()
        if room is not None:
            room.close()


def _same_holdings(got, want) -> None:
    a, b = got.system.ledger_, want.system.ledger_
    assert len(a) == len(b) == len(got.ledger) == len(want.ledger)
    assert a.vectors.tobytes() == b.vectors.tobytes()
    assert a.stored_columns() == b.stored_columns()
    assert [a[i] for i in (0, 1, len(a) - 1)] == [b[i] for i in (0, 1, len(b) - 1)]
    assert got.ledger.head() == want.ledger.head()
    assert got.ledger.tree.levels == want.ledger.tree.levels
    assert got.ledger.inclusion_proof(3) == want.ledger.inclusion_proof(3)


@pytest.mark.parametrize("read_into_shared_memory", [True, False])
def test_a_worker_built_from_the_shared_entries_holds_and_answers_what_the_file_gives(ledger, read_into_shared_memory):
    path, centres, rng = ledger
    shared = _published(path, read_into_shared_memory)
    handed = pickle.loads(pickle.dumps(shared))  # (a spawned worker gets its own descriptor the same way)
    try:
        worker = open_substrate(path, verify="checkpoint", known=handed.known_prefix())
        assert handed.lend_codes(worker)
    finally:
        handed.close()
        shared.close()
    plain = open_substrate(path, verify="checkpoint")
    try:
        assert _owner(worker.system.ledger_.vectors) is not None  # the mapped rows themselves, not a copy
        assert _owner(plain.system.ledger_.vectors) is None
        _same_holdings(worker, plain)
        queries = [
            q[None] for q in _unit(centres[rng.integers(len(centres), size=200)] + rng.normal(0, 0.2, (200, DIM)))
        ]
        lent = worker.system.index_.shortlist("i8")
        assert len(lent) == ENTRIES  # the codes were handed over, not made again
        own = plain.system.index_.shortlist("i8")
        for got, want in zip(worker.explain_each(queries, lent), plain.explain_each(queries, own)):
            assert got == want
        assert lent.snapshot() == own.snapshot()  # coded beside the other columns, as a worker codes alone
        assert np.array_equal(lent._codes[:ENTRIES], own._codes[:ENTRIES])
        assert worker.predict(np.concatenate(queries)) == plain.predict(np.concatenate(queries))
    finally:
        worker.close()
        plain.close()


def test_entries_committed_after_the_supervisor_read_are_read_from_the_file(ledger):
    path, centres, rng = ledger
    shared = _published(path)
    extra = _unit(rng.normal(size=(300, DIM)))
    with DurableLedger.open(path, verify="checkpoint") as led:  # a writer, after the supervisor's read
        led.extend(extra, ["late"] * 300, _texts(ENTRIES, ENTRIES + 300))
    try:
        worker = open_substrate(path, verify="checkpoint", known=shared.known_prefix())
    finally:
        shared.close()
    plain = open_substrate(path)
    try:
        assert len(worker) == ENTRIES + 300
        _same_holdings(worker, plain)
        assert worker.predict(extra[:5]) == ["late"] * 5
    finally:
        worker.close()
        plain.close()


def test_a_workers_appends_go_to_its_own_memory_not_the_shared_rows(ledger):
    path, _, rng = ledger
    shared = _published(path)
    try:
        before = _shared_bytes(shared)
        worker = open_substrate(path, verify="checkpoint", known=shared.known_prefix(), grow_ahead=True)
        shared.lend_codes(worker)
        other = open_substrate(path, verify="checkpoint", known=shared.known_prefix())  # a second worker
        try:
            new = _unit(rng.normal(size=(3, DIM)))
            worker.correct(new, ["mine"] * 3, ["a", None, "c"])
            worker.system.index_.shortlist("i8").catch_up(worker.system.ledger_.vectors)
            assert worker.predict(new) == ["mine"] * 3
            assert _shared_bytes(shared) == before  # the shared rows and codes are as published
            assert len(other.system.ledger_) == ENTRIES  # the other worker's rows did not move
            other.ledger.refresh()
            assert other.predict(new) == ["mine"] * 3  # it takes them in from the file
        finally:
            worker.close()
            other.close()
    finally:
        shared.close()
    again = _published(path)  # a restart: what the workers appended is in the file, and handed on
    try:
        restarted = open_substrate(path, verify="checkpoint", known=again.known_prefix())
        assert len(restarted) == ENTRIES + 3
        assert restarted.predict(new) == ["mine"] * 3
        restarted.close()
    finally:
        again.close()


def test_a_file_changed_since_the_supervisor_read_is_read_again_and_refused(ledger):
    import sqlite3

    from ocrr.errors import OcrrError

    path, _, _ = ledger
    shared = _published(path)
    with sqlite3.connect(path) as conn:  # history rewritten after the supervisor's check
        conn.execute("DROP TRIGGER IF EXISTS entries_no_update")
        triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
        for name in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE entries SET hash = zeroblob(32) WHERE id = ?", (ENTRIES - 1,))
    try:
        with pytest.raises(OcrrError, match=f"entry {ENTRIES - 1}"):
            open_substrate(path, known=shared.known_prefix())
    finally:
        shared.close()


def test_entries_past_the_shared_ones_are_rehashed_even_under_a_later_checkpoint(ledger):
    """A worker restarted on the supervisor's handoff reads the entries committed since it
    from the file. A checkpoint signed since vouches for them, but nobody rehashes what this
    worker takes in later (the supervisor's pass covers the shared entries only), so the
    worker rehashes them itself: a label edited under that checkpoint is refused at open."""
    import sqlite3

    from ocrr.errors import OcrrError
    from ocrr.ledger.heads import Signer

    path, centres, rng = ledger
    signer = Signer.generate("example.com/shared")
    shared = _published(path)
    try:
        with DurableLedger.open(path, verify="checkpoint", signer=signer) as led:  # the service serves
            led.extend(_unit(rng.normal(size=(10, DIM))), ["later"] * 10, [None] * 10)
            assert led.verify("full")  # and records a checkpoint signed at ENTRIES + 10
        with sqlite3.connect(path) as conn:  # a later entry's label edited, its stored hash kept
            for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
                conn.execute(f"DROP TRIGGER {name}")
            conn.execute("UPDATE entries SET label = 'forged' WHERE id = ?", (ENTRIES + 5,))
        with pytest.raises(OcrrError, match=f"entry {ENTRIES + 5}: stored hash does not match its contents"):
            open_substrate(path, verify="checkpoint", known=shared.known_prefix(), signer=signer)
    finally:
        shared.close()


def _owner(rows: np.ndarray):
    """The mapping under ``rows`` when they lie in one (``shared_rows``), else None."""
    while isinstance(rows, np.ndarray):
        rows = rows.base
    return rows if getattr(rows, APPENDABLE, False) else None


def _shared_bytes(shared) -> bytes:
    with mmap.mmap(shared.fd, shared.layout.total, prot=mmap.PROT_READ) as m:
        with mmap.mmap(shared.rows_fd, 0, prot=mmap.PROT_READ) as rows:
            return bytes(rows) + bytes(m)


def test_two_workers_answer_the_exact_vote_and_keep_what_they_were_taught_across_a_restart(ledger):
    pytest.importorskip("fastapi")
    pytest.importorskip("requests")
    import signal
    import time

    from service_helpers import TOKEN, free_port, serve_workers, session_on, wait_for_workers

    from ocrr.batch import Batch
    from ocrr.systems.registry import make_system

    path, centres, rng = ledger
    with open_substrate(path) as exact:
        vecs, labels = np.array(exact.system.ledger_.vectors), list(exact.system.ledger_.labels)
    queries = _unit(centres[rng.integers(len(centres), size=60)] + rng.normal(0, 0.2, (60, DIM)))
    want = list(make_system("substrate").fit(Batch(vecs, None, labels)).predict(Batch(queries)))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    taught = _unit(rng.normal(size=(2, DIM)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    for start in ("first", "restarted"):
        proc = serve_workers(path, port)
        try:
            pids = wait_for_workers(url, proc, 2, time.monotonic() + 60)
            for pid in pids.values():  # each maps the supervisor's memory file
                assert "memfd:ocrr-shared-rows" in open(f"/proc/{pid}/maps").read()
            on = [session_on(url, slot, time.monotonic() + 30) for slot in (0, 1)]
            for slot in (0, 1):  # every worker answers from the rows the supervisor handed it
                got = [
                    on[slot].post(f"{url}/predict", json={"vectors": [q.tolist()]}, headers=auth).json()
                    for q in queries
                ]
                assert [a["predictions"][0]["label"] for a in got] == want
            if start == "first":  # taught through worker 0 after the start: worker 1 reads it from the file
                answer = on[0].post(
                    f"{url}/correct", json={"vectors": taught.tolist(), "labels": ["taught"] * 2}, headers=auth
                )
                assert answer.status_code == 200, answer.text
            for slot in (0, 1):
                got = on[slot].post(f"{url}/predict", json={"vectors": taught.tolist()}, headers=auth).json()
                assert [p["label"] for p in got["predictions"]] == ["taught"] * 2
            for s in on:
                s.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, proc.stderr.read()


def test_the_free_rows_past_the_shared_ones_are_not_backed_ahead(tmp_path):
    """A worker's room for appends past the shared rows is memory of its own, backed page by
    page as rows land in it: growing ahead (``ocrr serve``'s) does not back it all at once."""
    from ocrr.service.shared_rows import _private_buffer
    from ocrr.utils.grow_ahead import MIN_BYTES, GrowAhead

    rows = np.ones((64, 256), np.float32)
    shared = _published_rows(rows)
    try:
        buf = _private_buffer(shared, 0, rows.nbytes, (4 * MIN_BYTES // 1024, 256), np.dtype(np.float32))
        ahead = GrowAhead()
        ahead.watch(buf, len(rows))
        ahead.join()
        assert _resident_kb(buf) <= rows.nbytes // 1024 + 4  # the shared rows' pages at most, not the tail
        assert buf[: len(rows)].tobytes() == rows.tobytes()
    finally:
        import os

        os.close(shared)


def _published_rows(rows: np.ndarray) -> int:
    import os

    fd = os.memfd_create("test-rows")
    os.ftruncate(fd, rows.nbytes)
    with mmap.mmap(fd, rows.nbytes) as out:
        out[:] = rows.tobytes()
    return fd


def _resident_kb(array: np.ndarray) -> int:
    """Kilobytes of ``array``'s mappings resident in this process (/proc/self/smaps)."""
    lo, hi = array.ctypes.data, array.ctypes.data + array.nbytes
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start < hi and end > lo
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


def test_a_stored_size_claiming_more_rows_than_the_file_holds_sizes_no_shared_memory(tmp_path):
    """The meta table is storage: a size it claims beyond what the file could hold is not
    turned into shared memory (the check that follows reads the file and says what is wrong)."""
    import sqlite3

    from ocrr.service.shared_rows import available, room_for_rows

    if not available():
        pytest.skip("shared memory needs Linux's memfd")
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=4) as led:
        led.extend(np.eye(4, dtype=np.float32), ["a", "b", "c", "d"])
    room = room_for_rows(path)
    assert room is not None and room.buffer.shape == (4, 4)
    room.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'size'", (10**12,))
    assert room_for_rows(path) is None


def test_a_workers_hashes_labels_and_texts_are_the_shared_memory_not_copies(ledger):
    """The worker's ledger reads the published columns where they lie (read-only), and keeps
    only what it appends itself; the held ledger's hashes too."""
    from ocrr.ledger.columns import HashColumn, LabelColumn, PrefixedBytes, TextColumn

    path, _, rng = ledger
    shared = _published(path)
    try:
        worker = open_substrate(path, verify="checkpoint", known=shared.known_prefix())
    finally:
        shared.close()
    plain = open_substrate(path, verify="checkpoint")
    try:
        labels, texts, hashes = worker.system.ledger_.stored_columns()
        assert isinstance(labels, LabelColumn) and isinstance(texts, TextColumn) and isinstance(hashes, HashColumn)
        for column in (labels, texts, hashes, worker.ledger._hashes):
            assert column._split == ENTRIES  # every published entry is in the read-only prefix
        assert hashes._prefix.readonly and texts._prefix[0].readonly and labels._prefix.readonly
        assert not hashes._own and not texts._own_ends and not labels._own  # nothing copied
        levels = worker.ledger.tree.levels
        assert all(isinstance(level, PrefixedBytes) and not level._own for level in levels)
        assert levels[0]._split == 32 * ENTRIES and levels[0]._prefix.readonly
        new = _unit(rng.normal(size=(2, DIM)))
        worker.correct(new, ["mine", "mine"], ["ü ✓", None])
        plain.ledger.refresh()
        assert len(hashes._own) == 2 * 32 and list(texts._own_none) == [0, 1]  # its own entries, after
        _same_holdings(worker, plain)
        assert [worker.system.ledger_[i] for i in range(ENTRIES - 2, ENTRIES + 2)] == [
            plain.system.ledger_[i] for i in range(ENTRIES - 2, ENTRIES + 2)
        ]
        assert worker.verify().ok
    finally:
        worker.close()
        plain.close()


@pytest.mark.parametrize("block", [64, 4096])
def test_a_signed_prefix_read_into_shared_memory_is_written_through_its_file_as_read(tmp_path, monkeypatch, block):
    """From a signed checkpoint the supervisor reads the entries a block per statement and
    writes their rows through the memory file's descriptor (``KnownPrefix.rows_fd``), not
    through its mapping: what the mapping then holds is what an open into its own memory holds,
    and no page of it was made before a row landed there."""
    from ocrr.ledger.heads import Signer
    from ocrr.ledger.sqlite import prefix

    monkeypatch.setattr(prefix, "_PREFIX_BLOCK", block)
    written = []
    write_at = prefix.write_at
    monkeypatch.setattr(
        prefix, "write_at", lambda fd, data, at: (written.append((at, len(data))), write_at(fd, data, at))
    )
    rng = np.random.default_rng(7)
    path, signer = tmp_path / "l.db", Signer.generate("example.com/shared-prefix")
    vecs = _unit(rng.normal(size=(1_000, DIM)))
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(vecs, [f"c{i % 9}" for i in range(1_000)], _texts(0, 1_000))
    with DurableLedger.open(path, signer=signer):  # a full check records the signed checkpoint
        pass
    with DurableLedger.open(path) as led:  # and entries after it, read one by one
        led.extend(vecs[:30], ["late"] * 30, _texts(0, 30))
    room = shared_rows.room_for_rows(path)
    assert room is not None and _resident_kb(room.buffer) == 0  # nothing backed before the scan
    try:
        opened = open_checked(path, verify="checkpoint", signer=signer, known=room.known_prefix())
        plain = open_checked(path, verify="checkpoint", signer=signer)
        try:
            assert opened.ledger.report.checked_from == plain.ledger.report.checked_from == 1_000
            assert room.holds(opened.ledger.memory.vectors)
            assert sorted(written) == [
                (lo * DIM * 4, (min(lo + block, 1_000) - lo) * DIM * 4) for lo in range(0, 1_000, block)
            ]
            assert opened.ledger.memory.vectors.tobytes() == plain.ledger.memory.vectors.tobytes()
            assert room.buffer[:1_030].tobytes() == np.concatenate([vecs, vecs[:30]]).tobytes()
            assert opened.ledger.memory.stored_columns() == plain.ledger.memory.stored_columns()
            assert opened.ledger.tree.levels == plain.ledger.tree.levels and opened.ledger.head() == plain.ledger.head()
        finally:
            opened.close()
            plain.close()
    finally:
        room.close()


def test_a_workers_rows_grow_in_place_past_the_shared_ones_and_nothing_is_made_ahead(tmp_path):
    """Corrections past a worker's room (three quarters full at open) grow its rows in place:
    the shared rows stay mapped from the supervisor's memory file, not copied into a buffer of
    twice the rows beside them (a private copy of every row, per worker), and growing ahead
    (``ocrr serve``'s) makes no such buffer either."""
    dim, n = 256, 4_200  # rows of 4 MB: big enough for growing ahead and in place
    rng = np.random.default_rng(9)
    path = tmp_path / "big.db"
    with DurableLedger.open(path, dim=dim) as led:
        led.extend(_unit(rng.normal(size=(n, dim))), [f"c{i % 5}" for i in range(n)])
    shared = _published(path)
    try:
        worker = open_substrate(path, verify="checkpoint", known=shared.known_prefix(), grow_ahead=True)
        try:
            chain = worker.system.ledger_
            start, capacity = chain.vectors.ctypes.data, chain.vector_buffer_bytes // (4 * dim)
            assert n < capacity < 2 * n
            taught = _unit(rng.normal(size=(capacity - n + 100, dim)))
            for lo in range(0, len(taught), 250):  # past three quarters, then past the room
                worker.correct(taught[lo : lo + 250], ["taught"] * len(taught[lo : lo + 250]))
            assert len(chain) == n + len(taught) > capacity
            assert chain.vectors.ctypes.data == start  # grown in place
            assert chain._ahead is not None and chain._ahead.made == 0  # no next buffer made ahead
            maps = open("/proc/self/maps").read().splitlines()
            shared_map = [line for line in maps if "memfd:ocrr-shared-rows" in line]
            assert any(int(line.split("-")[0], 16) == start for line in shared_map)  # still the shared pages
            assert np.array_equal(chain.vectors[n:], taught)
            assert worker.predict(taught[-3:]) == ["taught"] * 3
        finally:
            worker.close()
    finally:
        shared.close()


def test_rows_that_would_not_fit_in_the_memory_left_are_refused_before_any_is_read(ledger, monkeypatch):
    """A machine (or container) with less memory left than the rows need gets one error that
    says so, before the supervisor reads anything: not the out-of-memory killer half way
    through, which may pick another process."""
    from ocrr.errors import OcrrError
    from ocrr.ledger import rows

    path, _, _ = ledger
    need = ENTRIES * DIM * 4
    monkeypatch.setattr(rows, "_ASK_FROM", 0)  # (these rows are small: asked about all the same)
    monkeypatch.setattr(rows, "available_bytes", lambda: need - 1)
    with pytest.raises(
        OcrrError,
        match=r"6,000 entries of 16 float32 need 0\.0 GB of memory for the rows the workers share.* open it where",
    ):
        shared_rows.room_for_rows(path)
    monkeypatch.setattr(rows, "available_bytes", lambda: need)
    room = shared_rows.room_for_rows(path)
    assert room is not None
    room.close()
    monkeypatch.setattr(rows, "available_bytes", lambda: None)  # the system does not say
    room = shared_rows.room_for_rows(path)
    assert room is not None
    room.close()
