"""Buffers that grow in place: address space reserved once, backed as rows land.

A capacity-doubling buffer (a ``Chain``'s rows) that fills is copied into a new buffer twice
its size: fresh memory for all of it, which the kernel zeroes and, on a virtual machine, the
host backs first (slow: ``ocrr.utils.grow_ahead``), and a copy of every row. Reserving a wide
range of address space once instead (``MAP_NORESERVE``: no memory is set aside, and a page is
backed only when first written) makes the next capacity a longer view of the same memory: the
rows stay where they are and only the new half is fresh.

``grow(buf, rows, row_shape, dtype)`` gives that view, or a view of a new reservation (the
caller copies its rows in), or None where the system refuses a reservation (strict
overcommit), the process's address space is capped (``ulimit -v``) or there is none (not
Linux): the caller allocates as before. What a caller sees is the same either way: an uninitialised array of the rows
asked for.
"""

from __future__ import annotations

import mmap
import sys
from typing import Any

import numpy as np

__all__ = [
    "GROWS_IN_PLACE",
    "RESERVE_BYTES",
    "Reservation",
    "grow",
    "memory_of",
    "next_half",
    "reservation_of",
    "room_to_grow",
]

RESERVE_BYTES = 64 << 30  # the least address space a reservation takes (not memory: see above)
_GROWTH = 8  # a new reservation has room for this many times the rows asked for
# Linux's flag (Python names it from 3.13); elsewhere buffers grow as before (no reservation).
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000) if sys.platform.startswith("linux") else None


class Reservation(mmap.mmap):
    """A private anonymous mapping used only by ``grow``: what tells its views apart from other
    memory-mapped arrays (a file's)."""


#: The attribute, true, of a memory object other than a ``Reservation`` whose length is
#: address space reserved the same way (``ocrr.service.shared_rows``' copy-on-write rows, the
#: shared ones first): views of it grow in place as a reservation's do.
GROWS_IN_PLACE = "ocrr_grows_in_place"


def room_to_grow(nbytes: int) -> int:
    """The address space to reserve for a buffer of ``nbytes`` that may grow in place (pages,
    as ``grow`` reserves them); ``nbytes`` where no reservation can be made."""
    if _MAP_NORESERVE is None or _address_space_limited():
        return nbytes
    return -(-max(RESERVE_BYTES, _GROWTH * nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE


def memory_of(array: np.ndarray) -> object:
    """The object whose memory ``array`` views, past any arrays between (``array`` itself
    when it owns its memory)."""
    memory: object = array
    while isinstance(memory, np.ndarray) and memory.base is not None:
        memory = memory.base
    return memory


def reservation_of(array: np.ndarray) -> Any:
    """The reservation ``array`` is a view of from its first byte (a ``Reservation``, or memory
    marked ``GROWS_IN_PLACE``), or None."""
    memory: Any = memory_of(array)
    if not isinstance(memory, Reservation) and not getattr(memory, GROWS_IN_PLACE, False):
        return None
    start = np.frombuffer(memory, np.uint8, count=1).ctypes.data
    return memory if array.ctypes.data == start else None


def grow(buf: np.ndarray | None, rows: int, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """An uninitialised (rows, *row_shape) array: a view of ``buf``'s own reservation when it
    has room (``buf``'s rows are already in it: the same memory), else of a new reservation
    with room to grow (``buf``'s rows are not: the caller copies them), or None when no
    reservation can be made."""
    nbytes = rows * int(np.prod(row_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    region = None if buf is None else reservation_of(buf)
    if region is None or len(region) < nbytes:
        size = room_to_grow(nbytes)
        if size == nbytes or _MAP_NORESERVE is None:
            return None
        try:
            region = Reservation(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE)
        except (OSError, ValueError, OverflowError):
            return None
    return np.ndarray((rows, *row_shape), dtype, buffer=region)


def _address_space_limited() -> bool:
    """A process whose address space is capped (``ulimit -v``, as some clusters set it) counts
    a reservation against the cap as if it were memory: it reserves none, lest its other
    allocations fail while little memory is in use."""
    import resource  # (Unix only; called on Linux only)

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY


def next_half(buf: np.ndarray) -> np.ndarray | None:
    """The bytes of ``buf``'s reservation that its next capacity (twice its rows) adds, as far
    as the reservation reaches; None when ``buf`` is not a reservation's view or it is full."""
    region = reservation_of(buf)
    if region is None:
        return None
    lo = buf.nbytes
    hi = min(2 * lo, len(region))
    return np.ndarray(hi - lo, np.uint8, buffer=region, offset=lo) if hi > lo else None
