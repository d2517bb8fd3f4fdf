"""Float32 rows of a file, read with ``pread`` instead of a memory map.

An IVF index re-ranks its candidates from the stored float32 vectors, which at 10M entries
(15 GB) live in a file. Read through a memory map, every page a re-rank touches is mapped
into the process, and the kernel maps the already-cached pages around it too
(fault-around: many times the bytes actually read, ``ocrr.studies.scale.memory``), so the
process's resident size shows much of the file besides its own memory
(docs/reference/measurements.md). Read with ``pread``, the file's pages stay in the
kernel's page cache, shared and reclaimable, and the process holds only what it copied
out. The re-rank reads a few rows per query either way.

``FileRows`` is what the index's ``source`` returns: ``rows[i]``, ``rows[ids]`` (a
gather, one read per run of consecutive rows), ``rows[lo:hi]`` (a lazy view),
``np.asarray(rows)`` (reads the view), ``len``, ``shape``.

Cold rows. A gather first reads every run with ``RWF_NOWAIT`` (served only from the page
cache, never waiting for the disk); the runs that were not cached are then all announced
to the kernel at once (``POSIX_FADV_WILLNEED``, which starts their reads without waiting)
and read. The disk then fetches them in parallel instead of one after another: a query
re-ranking 80 rows of an evicted file waits for about one disk read, not 80.
"""

from __future__ import annotations

import errno
import os

import numpy as np

from ocrr.utils.files import read_into

_F4 = np.dtype("<f4")
_NOWAIT = getattr(os, "RWF_NOWAIT", 0)  # Linux >= 4.14 (buffered reads); 0: plain reads only


class FileRows:
    def __init__(self, fd: int, n: int, dim: int, first: int = 0):
        self.fd, self.n, self.dim, self.first = fd, int(n), int(dim), int(first)
        self._row_bytes = self.dim * _F4.itemsize
        self._nowait = bool(_NOWAIT)  # turned off if the file system refuses the flag

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.dim)

    @property
    def dtype(self) -> np.dtype:
        return _F4

    def __len__(self) -> int:
        return self.n

    def _read(self, lo: int, count: int) -> np.ndarray:
        """``count`` rows from row ``lo`` of this view (absolute row first + lo)."""
        out = np.empty((count, self.dim), _F4)
        read_into(self.fd, out, (self.first + lo) * self._row_bytes)
        return out

    def __getitem__(self, key: int | np.integer | slice | np.ndarray) -> FileRows | np.ndarray:
        if isinstance(key, slice):
            lo, hi, step = key.indices(self.n)
            if step != 1:
                raise IndexError("FileRows slices take step 1")
            return FileRows(self.fd, max(0, hi - lo), self.dim, self.first + lo)
        if isinstance(key, (int, np.integer)):
            i = int(key) + (self.n if key < 0 else 0)
            if not 0 <= i < self.n:
                raise IndexError(f"row {key} is outside 0..{self.n - 1}")
            return self._read(i, 1)[0]
        ids = np.asarray(key, np.int64)
        flat = ids.ravel()
        if len(flat) and (flat.min() < 0 or flat.max() >= self.n):
            raise IndexError(f"rows outside 0..{self.n - 1}")
        out = np.empty((len(flat), self.dim), _F4)
        order = np.argsort(flat, kind="stable")
        rows = flat[order]
        # runs of consecutive (or repeated) rows: one read each
        breaks = np.flatnonzero(np.diff(rows) > 1) + 1
        runs = [run for run in np.split(np.arange(len(rows)), breaks) if len(run)]
        spans = [(int(rows[run[0]]), int(rows[run[-1]]) - int(rows[run[0]]) + 1) for run in runs]
        for run, (lo, _), block in zip(runs, spans, self._read_runs(spans)):
            out[order[run]] = block[rows[run] - lo]
        return out.reshape(*ids.shape, self.dim)

    def _read_runs(self, spans: list[tuple[int, int]]) -> list[np.ndarray]:
        """The rows of each (first row, count) span; uncached spans are fetched together."""
        got: list[np.ndarray | None] = [self._cached(lo, count) for lo, count in spans]
        missing = [j for j, block in enumerate(got) if block is None]
        if len(missing) > 1:  # start every disk read before waiting for the first
            for j in missing:
                lo, count = spans[j]
                os.posix_fadvise(
                    self.fd, (self.first + lo) * self._row_bytes, count * self._row_bytes, os.POSIX_FADV_WILLNEED
                )
        for j in missing:
            got[j] = self._read(*spans[j])
        return [block for block in got if block is not None]

    def _cached(self, lo: int, count: int) -> np.ndarray | None:
        """The rows if the page cache holds them all (a read that never waits), else None."""
        if not self._nowait:
            return None
        buf = bytearray(count * self._row_bytes)
        try:
            n = os.preadv(self.fd, [buf], (self.first + lo) * self._row_bytes, _NOWAIT)
        except BlockingIOError:
            return None
        except OSError as err:  # a file system without RWF_NOWAIT: plain reads from now on
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            self._nowait = False
            return None
        if n != len(buf):
            return None
        return np.frombuffer(buf, _F4).reshape(count, self.dim)

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        rows = self._read(0, self.n) if self.n else np.empty((0, self.dim), _F4)
        return rows if dtype is None else np.asarray(rows, dtype)
