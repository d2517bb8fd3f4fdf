"""Grow an append-only buffer before it is full, off the thread that appends.

A capacity-doubling buffer copies its rows into fresh memory when it fills. The copy is
cheap; the fresh memory is not: the first write to each page makes the kernel (and, on a
virtual machine, the host) back it: milliseconds per MB on a small virtual machine, so a
ledger of 16k entries of 384 floats that doubles stalls its appender for tens of
milliseconds (docs/reproductions/service.md, "What the defaults rest on"), and every
request waiting on that thread (a service's predicts, which take in new entries first)
waits with it. Appends into a buffer's untouched tail pay the same price, 2 MB at a time
where the buffer lies in huge pages.

``GrowAhead`` moves that work to a background thread: once a buffer is three quarters
full it allocates the next one (twice the capacity, as the append would), has the kernel
back all of its pages (``populate``), and copies the rows present then (rows of an
append-only buffer never change); later appends copy their rows into it too. When the
buffer does fill, the append takes that buffer over, with nothing left to copy. The
capacities, and so everything a caller sees, are those of growing in place; only when the
work happens changes. The price is memory: from three quarters full until the switch, the
next buffer is held beside the current one. A buffer that grows in place
(``ocrr.utils.reserved``) needs no next buffer: the background work backs the rows its next
capacity adds, and the switch copies nothing.

The background work is paced: after each slice it rests four times as long as the slice
took, so it takes at most a fifth of a core while the buffer has room to spare. Done at
full speed it took a whole core for each doubling, and in a service every worker follows
the same ledger, so every worker did it at once, and most predicts answered meanwhile
missed the p99 budget (docs/reference/measurements.md). It runs flat out once the buffer
is seven eighths full, or as soon as the appends, at the pace they have come since the
buffer was made, would fill it before the paced work could end (with room to spare); and
appends that fast have the next buffer made from half full, not three quarters. A burst
of corrections must not find the next buffer missing and pay for it on the appending
thread.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

from ocrr.utils import reserved

_MADV_POPULATE_WRITE = 23  # Linux 5.14+: back the pages, writable, without changing their bytes
_POPULATE_SLICE = 2 << 20  # bytes backed per call (one huge page)
MIN_BYTES = 4 << 20  # smaller buffers grow in place: their fresh memory costs a few ms at most
_REST = 4.0  # the background work rests this many times as long as each slice took

_madvise = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _madvise = _libc.madvise
        _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _madvise.restype = ctypes.c_int
    except (OSError, AttributeError):
        _madvise = None


def room_at_open(rows: int, least: int) -> int:
    """The capacity (rows) to give a buffer filled with ``rows`` at once (a ledger opened,
    coded): a quarter of it free, so that ``due`` is not true at once and no second buffer
    of twice the rows is made beside it, but no more (the free rows are backed too, in the
    background: a power of two would have left up to half of a large buffer free). At least
    ``least``, in whole multiples of 64 rows."""
    return max(least, -(-(rows + rows // 3 + 1) // 64) * 64)


def due(rows: int, room: int, nbytes: int) -> bool:
    """Time to make the next buffer: ``rows`` fill three quarters of ``room`` (rows it holds;
    0 when not known), and the buffer is big enough (``nbytes``) for its growth to stall."""
    return nbytes >= MIN_BYTES and 4 * rows >= 3 * room


def populate(array: np.ndarray, rest: Callable[[float, int], None] | None = None) -> bool:
    """Have the kernel back every whole page of ``array``'s memory now, leaving its bytes as
    they are (so another thread may be writing rows of it meanwhile). Returns False where
    the kernel cannot (not Linux, or older than 5.14): the pages are then backed as they are
    first written, as without this call. Releases the GIL while the kernel works.
    ``rest(seconds, left)`` is called after each slice with the time the slice took and the
    number of slices still to do."""
    if _madvise is None or array.nbytes == 0:
        return False
    page = mmap.PAGESIZE
    start = -(-array.ctypes.data // page) * page  # whole pages only: the bytes around belong to others
    end = (array.ctypes.data + array.nbytes) // page * page
    if end <= start:
        return False
    # In slices: the kernel holds the process's memory-map lock for each call, and any other
    # thread that maps memory meanwhile (a large malloc) waits for it (one call for a whole
    # buffer stalled the service's other threads far longer than a slice: docs/reference/measurements.md).
    slices = range(start, end, _POPULATE_SLICE)
    for k, lo in enumerate(slices):
        began = time.perf_counter()
        if _madvise(lo, min(_POPULATE_SLICE, end - lo), _MADV_POPULATE_WRITE) != 0:
            return False
        if rest is not None:
            rest(time.perf_counter() - began, len(slices) - k - 1)
    return True


#: The attribute, true, of a memory object a numpy buffer is built over (``np.ndarray(buffer=…)``)
#: whose pages are small and private to this process, so that backing one as it is first
#: written costs little (``ocrr.service.shared_rows``' copy-on-write rows): no work is done
#: ahead for it. Its free tail is not backed, which would only hold memory no row uses yet, nor
#: is a next buffer made: it grows in place where address space past it is reserved, and a
#: buffer of twice the rows made beside it would hold a private copy of rows it shares.
SMALL_PAGES = "ocrr_small_pages"


def _small_pages(array: np.ndarray) -> bool:
    return bool(getattr(reserved.memory_of(array), SMALL_PAGES, False))


class GrowAhead:
    """The next buffer of one capacity-doubling (rows, ...) array, made in the background.

    The owner calls ``watch(buf, n)`` after it reserves room (``n``: rows written so far) and
    ``take(buf, n, need)`` when ``need`` rows no longer fit: the grown buffer with rows
    ``[0, n)`` in place (``watch`` copies the rows written since it was made, a few at a
    time), or None (not ready, or too small: grow in place). Both run on the
    owner's appending thread, under whatever lock guards its appends."""

    def __init__(self) -> None:
        self._ready: tuple[np.ndarray, np.ndarray, int] | None = None  # (source buffer, grown, rows copied)
        self._busy = False
        self._populated: int | None = None  # id() of the buffer whose tail is backed (or being backed)
        self._ahead_for: int | None = None  # id() of the buffer whose successor is made (or being made)
        self.made = 0  # next capacities made ready ahead (for tests and benchmarks)
        self._thread: threading.Thread | None = None
        self._fill = 0.0  # how full the owner's buffer was at the last watch (read by the pacing)
        self._due_in = float("inf")  # seconds until the appends fill it, at their pace so far
        self._since: tuple[int, float, int] | None = None  # (id of the buffer, time, rows) at its first watch
        self._backed_per_second = 0.0  # bytes the last background work backed per second of work (0: none yet)
        self._worked = 0.0  # seconds of work (rests left out) of the background work in flight

    def watch(self, buf: np.ndarray, n: int) -> None:
        self._fill = n / len(buf) if len(buf) else 1.0
        self._time_to_fill(buf, n)
        ready = self._ready
        if ready is not None and ready[0] is not buf:  # made for a buffer since grown in place: let it go
            ready = self._ready = None
        if ready is not None and ready[2] < n:  # keep it complete: taking it copies nothing
            ready[1][ready[2] : n] = buf[ready[2] : n]
            self._ready = (buf, ready[1], n)
        if buf.nbytes < MIN_BYTES or self._busy:
            return
        if _small_pages(buf):  # backed as rows land, and its next capacity too (see SMALL_PAGES)
            return
        if self._populated != id(buf):  # back the tail that appends will write
            self._populated = id(buf)
            self._start(self._populate_tail, buf, n)
        elif (
            ready is None
            and self._ahead_for != id(buf)
            and (due(n, len(buf), buf.nbytes) or self._filling_fast(buf, n))
        ):
            self._ahead_for = id(buf)
            half = reserved.next_half(buf)
            if half is not None:  # it grows in place: back the rows its next capacity adds
                self._start(self._back_next, half, n)
            else:
                self._start(self._make, buf, n)

    def take(self, buf: np.ndarray, n: int, need: int) -> np.ndarray | None:
        ready, self._ready = self._ready, None
        if ready is None or ready[0] is not buf or len(ready[1]) < need:
            return None
        _, grown, copied = ready
        grown[copied:n] = buf[copied:n]
        self._populated = id(grown)  # backed already
        return grown

    def join(self) -> None:
        """Wait for the background work in flight, if any (tests)."""
        if self._thread is not None:
            self._thread.join()

    def _start(self, work: Callable[[np.ndarray, int], None], buf: np.ndarray, n: int) -> None:
        self._busy = True
        self._thread = threading.Thread(target=work, args=(buf, n), name="ocrr-grow-ahead", daemon=True)
        self._thread.start()

    def _time_to_fill(self, buf: np.ndarray, n: int) -> None:
        """Update ``_due_in``: when ``n`` rows of ``buf`` reach its end, at the pace the rows
        have come since this buffer was first watched."""
        now = time.monotonic()
        if self._since is None or self._since[0] != id(buf):
            self._since, self._due_in = (id(buf), now, n), float("inf")
            return
        _, then, rows = self._since
        if n > rows and now > then:
            self._due_in = (len(buf) - n) * (now - then) / (n - rows)

    def _filling_fast(self, buf: np.ndarray, n: int) -> bool:
        """Half full, and the appends would fill it in less than twice the time that backing
        the next capacity takes at the pace backing went last time: make it ready now rather
        than at three quarters."""
        if 2 * n < len(buf) or buf.nbytes < MIN_BYTES or not self._backed_per_second:
            return False
        return self._due_in < 2 * (2 * buf.nbytes / self._backed_per_second)

    def _pace(self, took: float, left: int = 0) -> None:
        """Rest after a slice of background work (``left``: slices still to do), unless the
        buffer is nearly full or the appends would fill it before the paced work ends."""
        self._worked += took
        paced = (1 + _REST) * took * (left + 1)  # +1: the copy after the slices
        if self._fill < 0.875 and 2 * paced < self._due_in:
            time.sleep(_REST * took)

    def _back(self, array: np.ndarray) -> None:
        """``populate(array)``, paced, noting how fast the kernel backed it."""
        self._worked = 0.0
        if populate(array, self._pace) and self._worked > 0:
            self._backed_per_second = array.nbytes / self._worked

    def _populate_tail(self, buf: np.ndarray, n: int) -> None:
        try:
            self._back(buf[n:])
        finally:
            self._busy = False

    def _back_next(self, half: np.ndarray, n: int) -> None:
        try:
            self._back(half)
            self.made += 1
        finally:
            self._busy = False

    def _make(self, buf: np.ndarray, n: int) -> None:
        try:
            grown = np.empty((2 * len(buf), *buf.shape[1:]), buf.dtype)
            self._back(grown)
            grown[:n] = buf[:n]  # rows below n never change; numpy releases the GIL for the copy
            self._ready = (buf, grown, n)
            self.made += 1
        finally:
            self._busy = False
