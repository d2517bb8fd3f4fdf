"""A reserved buffer grows in place: the same memory, its rows where they were."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ocrr.ledger.chain import Chain
from ocrr.utils import grow_ahead, reserved
from ocrr.utils.reserved import grow, next_half, reservation_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MAP_NORESERVE as Linux has it")

F4 = np.dtype("<f4")


def test_a_view_grows_over_the_same_memory_with_its_rows_in_place():
    small = grow(None, 64, (8,), F4)
    assert small is not None and small.shape == (64, 8) and reservation_of(small) is not None
    small[:] = np.arange(64 * 8, dtype=F4).reshape(64, 8)
    big = grow(small, 128, (8,), F4)
    assert big is not None and big.shape == (128, 8)
    assert big.ctypes.data == small.ctypes.data  # nothing to copy
    assert np.array_equal(big[:64], small)
    assert reservation_of(big) is reservation_of(small)


def test_a_growth_past_the_reservation_takes_a_new_one(monkeypatch):
    monkeypatch.setattr(reserved, "RESERVE_BYTES", 4096)
    monkeypatch.setattr(reserved, "_GROWTH", 1)
    small = grow(None, 16, (16,), F4)  # 1 KB of a 4 KB reservation
    assert small is not None and len(reservation_of(small)) == 4096
    assert grow(small, 64, (16,), F4).ctypes.data == small.ctypes.data  # 4 KB: still fits
    moved = grow(small, 65, (16,), F4)
    assert moved is not None and moved.ctypes.data != small.ctypes.data  # the caller copies its rows


def test_no_reservation_where_the_system_refuses_one(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(reserved, "Reservation", refuse)
    assert grow(None, 64, (8,), F4) is None


def test_no_reservation_under_an_address_space_cap():
    """``ulimit -v`` counts reserved address space as memory: a capped process reserves none
    (in a child process: the cap stays with it)."""
    import subprocess
    import sys as _sys

    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (32 << 30, resource.RLIM_INFINITY)); "
        "import numpy as np; from ocrr.utils.reserved import grow; "
        "print(grow(None, 64, (8,), np.dtype('<f4')) is None)"
    )
    out = subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_chain_without_reservations_holds_the_same_entries(monkeypatch):
    monkeypatch.setattr(grow_ahead, "MIN_BYTES", 1024)  # reserve from a few KB
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((300, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    labels = [f"c{i % 4}" for i in range(300)]
    reserved_chain = Chain(16)
    reserved_chain.extend(vecs, labels)
    assert reservation_of(reserved_chain._buffer()) is not None
    monkeypatch.setattr(reserved, "grow", lambda *args: None)
    plain = Chain(16)
    plain.extend(vecs, labels)
    assert reservation_of(plain._buffer()) is None
    assert reserved_chain.vector_buffer_bytes == plain.vector_buffer_bytes
    assert np.array_equal(reserved_chain.vectors, plain.vectors) and reserved_chain.head == plain.head


def test_next_half_is_what_the_next_capacity_adds():
    buf = grow(None, 64, (8,), F4)
    half = next_half(buf)
    assert half is not None and half.nbytes == buf.nbytes
    assert half.ctypes.data == buf.ctypes.data + buf.nbytes
    assert next_half(np.empty((64, 8), F4)) is None  # not a reservation's
    assert next_half(buf[1:]) is None  # not from its first byte: no capacity of its own


def test_next_half_stops_at_the_end_of_the_reservation(monkeypatch):
    monkeypatch.setattr(reserved, "RESERVE_BYTES", 3 * 4096)
    monkeypatch.setattr(reserved, "_GROWTH", 1)
    buf = grow(None, 32, (64,), F4)  # 8 KB of 12 KB
    assert next_half(buf).nbytes == 4096
    assert next_half(grow(buf, 48, (64,), F4)) is None  # full


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_a_reservation_holds_no_memory_until_written():
    before = _rss_kb()
    buf = grow(None, 1 << 20, (384,), F4)  # 1.5 GB of rows, in a wider reservation
    assert buf is not None
    assert _rss_kb() - before < 64 << 10  # nothing backed yet
    buf[:1000] = 1.0
    assert _rss_kb() - before < 64 << 10  # only what was written (a few pages)
