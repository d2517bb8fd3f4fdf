"""Growing a buffer ahead changes when the work happens, never what a caller sees."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ocrr.index.exact import _scan_few
from ocrr.index.shortlist import Shortlist
from ocrr.ledger.chain import Chain
from ocrr.utils import grow_ahead, reserved
from ocrr.utils.grow_ahead import GrowAhead, populate

DIM = 16


def _unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def small_buffers(monkeypatch):
    """Grow ahead from a few KB, so a test needs only a few hundred rows."""
    monkeypatch.setattr(grow_ahead, "MIN_BYTES", 1024)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_populate_leaves_the_bytes_as_they_were():
    data = np.arange(3 << 20, dtype=np.uint8)  # whole pages and ragged ends
    before = data.copy()
    assert populate(data[5:])  # the kernels this project runs on (5.14+) have it
    assert np.array_equal(data, before)


def test_populate_of_nothing_is_a_no_op():
    assert populate(np.empty(0, np.float32)) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_populate_rests_after_every_slice():
    data = np.empty(5 * grow_ahead._POPULATE_SLICE, np.uint8)  # 5 slices, or 6 when not page-aligned
    rests: list[tuple[float, int]] = []
    assert populate(data, lambda took, left: rests.append((took, left)))
    assert len(rests) in (5, 6) and all(took >= 0 for took, _ in rests)
    assert [left for _, left in rests] == list(range(len(rests) - 1, -1, -1))  # slices still to do


def test_background_work_rests_while_the_buffer_has_room_and_hurries_when_nearly_full(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(grow_ahead.time, "sleep", slept.append)
    ahead = GrowAhead()
    buf = np.empty((64, DIM), np.float32)  # under MIN_BYTES: watch starts no work of its own
    ahead.watch(buf, 48)  # three quarters full: rests four times as long as a slice took
    ahead._pace(0.002)
    assert slept == [pytest.approx(4 * 0.002)]
    ahead.watch(buf, 56)  # seven eighths full: the next buffer is needed soon
    ahead._pace(0.002)
    assert slept == [pytest.approx(4 * 0.002)]


def test_background_work_hurries_when_the_appends_would_fill_the_buffer_first(monkeypatch):
    slept: list[float] = []
    clock = [100.0]
    monkeypatch.setattr(grow_ahead.time, "sleep", slept.append)
    monkeypatch.setattr(grow_ahead.time, "monotonic", lambda: clock[0])
    ahead = GrowAhead()
    buf = np.empty((1024, DIM), np.float32)  # under MIN_BYTES: watch starts no work of its own
    ahead.watch(buf, 512)
    clock[0] += 1.0
    ahead.watch(buf, 768)  # 256 rows a second: the last 256 rows come in one second
    ahead._pace(0.008, left=9)  # ten slices left: 0.4 s paced, with room to spare in 1 s
    assert slept == [pytest.approx(4 * 0.008)]
    ahead._pace(0.02, left=9)  # 1 s paced: the buffer would be full first, so no rest
    assert slept == [pytest.approx(4 * 0.008)]
    ahead.watch(np.empty((2048, DIM), np.float32), 1024)  # a new buffer: its pace is not known yet
    ahead._pace(0.02, left=9)
    assert slept == [pytest.approx(4 * 0.008), pytest.approx(4 * 0.02)]


def _made_ahead(buf: np.ndarray, n: int) -> GrowAhead:
    ahead = GrowAhead()
    ahead.watch(buf, n)  # first sight of this buffer: backs its tail
    ahead.join()
    ahead.watch(buf, n)  # three quarters full: makes the next one
    ahead.join()
    assert ahead.made == 1
    return ahead


def test_grow_ahead_hands_over_the_rows_written_meanwhile(small_buffers):
    buf = np.zeros((64, DIM), np.float32)
    buf[:48] = 1.0
    ahead = _made_ahead(buf, 48)
    buf[48:55] = 2.0  # rows written after the copy began, seen by the next watch
    ahead.watch(buf, 55)
    buf[55:60] = 3.0  # and rows no watch has seen yet
    grown = ahead.take(buf, 60, 65)
    assert grown is not None and grown.shape == (128, DIM)
    assert np.array_equal(grown[:60], buf[:60])
    assert ahead.take(buf, 60, 65) is None  # taken once


def test_grow_ahead_gives_nothing_too_small_or_for_another_buffer(small_buffers):
    buf = np.ones((64, DIM), np.float32)
    assert _made_ahead(buf, 48).take(buf, 48, 129) is None  # the owner must grow in place
    assert _made_ahead(buf, 48).take(buf.copy(), 48, 65) is None  # not this buffer's successor


def test_grow_ahead_lets_go_of_a_buffer_made_for_one_since_grown_in_place(small_buffers):
    buf = np.ones((64, DIM), np.float32)
    ahead = _made_ahead(buf, 48)
    ahead.watch(np.ones((128, DIM), np.float32), 70)  # the owner grew in place meanwhile
    assert ahead._ready is None  # its memory is not held on to
    assert ahead.take(buf, 48, 65) is None


def test_grow_ahead_leaves_small_buffers_alone():
    ahead = GrowAhead()
    ahead.watch(np.zeros((64, DIM), np.float32), 60)
    ahead.join()
    assert ahead._thread is None and ahead.made == 0


@pytest.mark.parametrize("in_place", [True, False], ids=["reserved", "copied"])
@pytest.mark.parametrize("batch", [1, 7, 50])
def test_a_chain_growing_ahead_holds_the_same_rows_capacities_and_hashes(small_buffers, monkeypatch, batch, in_place):
    if not in_place:  # no address space to reserve (strict overcommit): each buffer is made ahead, copied
        monkeypatch.setattr(reserved, "grow", lambda *args: None)
    elif not sys.platform.startswith("linux"):
        pytest.skip("address space is reserved on Linux only")
    rng = np.random.default_rng(batch)
    vecs = _unit_rows(rng, 700)
    plain, ahead = Chain(DIM), Chain(DIM)
    ahead.grow_ahead()
    assert ahead._ahead is not None
    starts = set()  # where the rows lie in memory
    for lo in range(0, len(vecs), batch):
        rows = vecs[lo : lo + batch]
        labels = [f"c{(lo + j) % 5}" for j in range(len(rows))]
        plain.extend(rows, labels)
        ahead.extend(rows, labels)
        ahead._ahead.join()  # each buffer made before it is needed: the path being tested
        assert ahead.vector_buffer_bytes == plain.vector_buffer_bytes
        starts.add(ahead._buffer().ctypes.data)
    assert ahead._ahead.made >= 2  # 64 -> ... -> 1024 rows: several capacities were made ready ahead
    assert (len(starts) == 1) == in_place  # reserved: the rows never moved; else each growth moved them
    assert np.array_equal(ahead.vectors, plain.vectors)
    assert ahead.head == plain.head
    assert ahead.verify().ok


def test_a_chain_growing_ahead_pickles_without_its_thread(small_buffers):
    import pickle

    chain = Chain(DIM)
    chain.grow_ahead()
    chain.extend(_unit_rows(np.random.default_rng(0), 100), ["a"] * 100)
    copy = pickle.loads(pickle.dumps(chain))
    assert copy._ahead is None and np.array_equal(copy.vectors, chain.vectors)


def test_vectors_on_disk_do_not_grow_ahead(tmp_path):
    chain = Chain(DIM, vectors_on_disk=tmp_path)
    chain.grow_ahead()
    assert chain._ahead is None  # a file grows in place


def _full_scan():
    return lambda m, q, k: _scan_few(m, 0, q, k)  # ids 0 on: row numbers


def _same(a, b):
    return np.array_equal(a[0].view(np.int32), b[0].view(np.int32)) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("code", ["fp16", "sq8"])
def test_a_shortlist_growing_ahead_answers_as_the_full_scan(small_buffers, monkeypatch, code):
    from ocrr.index import shortlist

    monkeypatch.setattr(shortlist, "_AHEAD_ROWS", 7)  # codes copied into the next copy in many slices
    rng = np.random.default_rng(7)
    rows = _unit_rows(rng, 3000)
    rows[1000:1040] = rows[999]  # exact duplicates: ties across the copies' boundaries
    rows[2000:2070] *= 1.5  # sq8: past the range, so every row is re-coded while copies are made ahead
    queries = _unit_rows(rng, 5)
    short = Shortlist(DIM, code=code)
    short.grow_ahead()
    swaps = 0
    n = 100
    while n < len(rows):
        before = short.index
        matrix = rows[:n]
        got = short.search(matrix, queries, 10, _full_scan())
        assert _same(got, _scan_few(matrix, 0, queries, 10))
        short.join_ahead()  # the next copy is ready before the rows that need it arrive
        swaps += short.index is not before
        n += int(rng.integers(1, 90))
    assert swaps >= 3  # copies made ahead were taken (100 rows -> 3000)
    held = short._codes(0, len(short))  # the coded copy is every row's, in order, once
    if code == "fp16":
        assert np.array_equal(held, rows[: len(short)].astype(np.float16).view(np.uint8))
    else:
        assert np.array_equal(held, short.index.sa_encode(rows[: len(short)]))


@pytest.mark.parametrize("code", ["fp16", "sq8"])
def test_a_shortlist_drops_a_copy_made_before_a_removal(small_buffers, code):
    rng = np.random.default_rng(3)
    rows = _unit_rows(rng, 600)
    queries = _unit_rows(rng, 3)
    short = Shortlist(DIM, code=code)
    short.grow_ahead()
    short.catch_up(rows[:300])
    short.join_ahead()
    assert short._ahead is not None
    drop = np.array([5, 17, 250])
    short.remove_rows(drop)
    kept = np.delete(rows[:300], drop, axis=0)
    matrix = np.concatenate([kept, rows[300:]])
    got = short.search(matrix, queries, 10, _full_scan())
    assert _same(got, _scan_few(matrix, 0, queries, 10))
    assert short._room == 0  # the copy made before the removal was not taken


def test_an_8bit_shortlist_drops_a_copy_made_before_its_rows_were_recoded(small_buffers):
    rng = np.random.default_rng(5)
    rows = _unit_rows(rng, 600)
    queries = _unit_rows(rng, 3)
    short = Shortlist(DIM, code="sq8")
    short.grow_ahead()
    short.catch_up(rows[:300])
    short.join_ahead()
    assert short._ahead is not None
    rows[300:400] *= 3  # past the range: every row re-coded, so the copy made ahead no longer lines up
    got = short.search(rows, queries, 10, _full_scan())
    assert _same(got, _scan_few(rows, 0, queries, 10))
    assert short._ahead is None or short._ahead[2] == short._epoch
    assert np.array_equal(short._codes(0, len(short)), short.index.sa_encode(rows))
