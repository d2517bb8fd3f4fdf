"""Float32 rows of a file, read with ``pread`` instead of a memory map.

An IVF index re-ranks its candidates from the stored float32 vectors, which at 10M
entries (15 GB) live in a file. Read through a memory map, every page a re-rank touches
is mapped into the process, and the kernel maps the already-cached pages around it too
(fault-around: about 70x the bytes actually read here, ``ocrr.studies.scale.memory``), so a
process that needs 3 GB of its own shows 15-17 GB resident. Read with ``pread``, the
file's pages stay in the kernel's page cache, shared and reclaimable, and the process
holds only what it copied out. The re-rank reads a few rows per query either way.

``FileRows`` is what the index's ``source`` returns: ``rows[i]``, ``rows[ids]`` (a
gather, one ``pread`` per run of consecutive rows), ``rows[lo:hi]`` (a lazy view),
``np.asarray(rows)`` (reads the view), ``len``, ``shape``.
"""

from __future__ import annotations

import os

import numpy as np

_F4 = np.dtype("<f4")


class FileRows:
    def __init__(self, fd: int, n: int, dim: int, first: int = 0):
        self.fd, self.n, self.dim, self.first = fd, int(n), int(dim), int(first)
        self._row_bytes = self.dim * _F4.itemsize

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
        want = count * self._row_bytes
        raw = os.pread(self.fd, want, (self.first + lo) * self._row_bytes)
        if len(raw) != want:
            raise OSError(f"vector file ended after {len(raw)} of {want} bytes at row {self.first + lo}")
        return np.frombuffer(raw, _F4).reshape(count, self.dim)

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
        for run in np.split(np.arange(len(rows)), breaks):
            if not len(run):
                continue
            lo, hi = int(rows[run[0]]), int(rows[run[-1]])
            block = self._read(lo, hi - lo + 1)
            out[order[run]] = block[rows[run] - lo]
        return out.reshape(*ids.shape, self.dim)

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        rows = self._read(0, self.n) if self.n else np.empty((0, self.dim), _F4)
        return rows if dtype is None else rows.astype(dtype)
