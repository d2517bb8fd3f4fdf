"""Keep freed C-heap memory out of a process's resident size (glibc).

glibc's ``malloc`` keeps memory that a program frees in its heap for the next request; only
the top of the heap is returned on its own. A phase that allocates many medium buffers
(numpy temporaries below the memory-map threshold) leaves freed pages scattered through the
heap, and they stay resident (the scale study's figures at 4M entries:
docs/reference/measurements.md). ``release_free_heap`` hands those
pages back (``malloc_trim(0)``).

Structures that grow by reallocation are worse: FAISS's inverted lists double their capacity
as they fill, and each growth frees the old copy between live lists, where it can be neither
reused whole nor returned. ``map_allocations_from(n)`` serves every allocation of ``n`` bytes
or more from its own memory map instead: freeing it returns it at once, and capacity never
written is never resident: at 4M entries it brought the built IVF-PQ process close to the
index's own bytes (docs/scale/ivf.md). Neither call moves or changes live data.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)


@functools.cache
def _libc() -> ctypes.CDLL | None:  # glibc, or None (another C library, another system)
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 (both must exist)
    except (OSError, AttributeError):
        return None
    return libc


def release_free_heap() -> bool:
    """Return the heap's free pages to the system; False where there is no glibc."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def map_allocations_from(nbytes: int) -> bool:
    """For the rest of the process, give each C allocation of at least ``nbytes`` its own
    memory map (glibc's fixed ``M_MMAP_THRESHOLD``; its default moves up to 32 MB as large
    blocks are freed). False where there is no glibc."""
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes}")
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)))
