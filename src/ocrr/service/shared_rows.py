"""The supervisor's checked entries, handed to its workers in shared memory.

``ocrr serve --workers N`` checks the ledger once, in the supervising process, as the
workers start. Rather than each worker opening the file again (reading and checking every
entry once more, and holding its own copy of every row and of their 8-bit codes), the
supervisor writes what it checked into one anonymous memory file (``memfd``, reachable only
through its descriptor, which each worker is handed as it is started): the float32 rows, their
8-bit codes (coded once, for every worker's pooled scans), the chain hashes, the Merkle tree's
levels, and the labels and texts as compact arrays (``publish``).

A worker (``SharedRows.known_prefix``, ``lend_codes``) maps the rows and the codes privately,
copy-on-write: pages it only reads are the same pages in every worker, counted once; rows it
appends after them go to memory of its own past the shared ones (the mapping's tail is private
anonymous memory), so no process writes a page another reads. The hashes, labels, texts and
the tree's levels it reads where they lie, mapped read-only: its ledger's columns and tree
levels (``ocrr.ledger.columns``) start with them and append its own entries after. The worker
then reads from
the file only the entries committed after the supervisor's read (``KnownPrefix``), and checks
them the usual way. Linux only (``available``): elsewhere each worker opens the file itself.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import reduction
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.index.exact import ExactIndex
from ocrr.index.file_rows import FileRows
from ocrr.index.int8_shortlist import Int8Shortlist
from ocrr.ledger.chain import APPENDABLE, F4LE
from ocrr.ledger.column_rehash import HeldColumns, chain_columns
from ocrr.ledger.columns import HashColumn, LabelColumn, PrefixedBytes, TextColumn
from ocrr.ledger.location import KnownPrefix, stored_shape
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.rows import MAX_DIM, check_memory
from ocrr.systems.substrate.core import Substrate
from ocrr.systems.substrate.persistent import PersistentSubstrate
from ocrr.utils import reserved
from ocrr.utils.files import write_at
from ocrr.utils.grow_ahead import SMALL_PAGES, room_at_open

__all__ = ["RowsRoom", "SharedRows", "available", "publish", "room_for_rows"]

_PAGE = mmap.PAGESIZE
_HASH = 32
_MAP_FIXED = 0x10  # Linux's value (the mmap module does not export it)
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # (Python names it from 3.13)
_CODE_ROWS_AT_LEAST = 1024  # as an Int8Shortlist's first buffer

_MADV_NOHUGEPAGE = 15  # Linux's value
_libc_mmap = _libc_munmap = _libc_madvise = None
if sys.platform.startswith("linux") and hasattr(os, "memfd_create"):
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc_mmap, _libc_munmap = _libc.mmap, _libc.munmap
        _libc_mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        _libc_mmap.restype = ctypes.c_void_p
        _libc_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc_munmap.restype = ctypes.c_int
        _libc_madvise = _libc.madvise
        _libc_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc_madvise.restype = ctypes.c_int
    except (OSError, AttributeError):
        _libc_mmap = _libc_munmap = _libc_madvise = None


def available() -> bool:
    """Whether this system can share the rows (Linux: ``memfd_create`` and ``mmap``)."""
    return _libc_mmap is not None


@dataclass(frozen=True)
class Layout:
    """Where each column lies in the memory file (byte offsets, each a whole page), and what
    is needed to read them: ``size`` entries of ``dim``."""

    size: int
    dim: int
    codes: int | None  # offset of the 8-bit codes (capacity x dim, the first size written), or None
    code_rows: int  # the codes' capacity (rows)
    shortlist: dict | None  # Int8Shortlist.snapshot() of the codes
    hashes: int  # chain hashes, 32 bytes each
    levels: tuple[tuple[int, int], ...]  # the tree's levels: (offset, bytes) each
    label_names: tuple[str, ...]
    label_codes: int  # int32 per entry: its label's place in label_names
    text_ends: int  # int64 per entry: where its text ends in the UTF-8 text blob (bytes)
    text_none: int  # uint8 per entry: 1 where the text is None
    texts: tuple[int, int]  # the UTF-8 text blob: (offset, bytes)
    total: int = 0


@dataclass
class SharedRows:
    """Two memory files of checked entries (``publish``): ``rows_fd`` the float32 rows (from
    offset 0), ``fd`` the rest, and where its columns lie. Pickled to a worker as it is
    spawned, the worker gets its own descriptors of them."""

    rows_fd: int
    fd: int
    layout: Layout
    _closed: list[bool] = field(default_factory=list)

    def __reduce__(self):
        # DupFd: while a process is being spawned, the descriptor is passed on to it
        return _attach, (reduction.DupFd(self.rows_fd), reduction.DupFd(self.fd), self.layout)

    def close(self) -> None:
        """Let go of the descriptors (the mappings made from them stay)."""
        if not self._closed:
            self._closed.append(True)
            os.close(self.rows_fd)
            os.close(self.fd)

    def known_prefix(self) -> KnownPrefix:
        """The entries, for ``open_substrate(known=…)``: the rows mapped copy-on-write into a
        buffer with room to grow (``room_at_open``); the hashes, labels, texts and the tree's
        levels as columns whose read-only prefix is the shared memory itself (mapped read-only:
        pages read stay shared, and no process can write them)."""
        lay = self.layout
        n, dim = lay.size, lay.dim
        capacity = room_at_open(n, 64)
        vectors = _private_buffer(self.rows_fd, 0, n * dim * F4LE.itemsize, (capacity, dim), F4LE)
        # Not closed: the columns' prefixes are views of it (it is unmapped once none is left).
        view = memoryview(mmap.mmap(self.fd, lay.total, prot=mmap.PROT_READ)).toreadonly()
        tree = MerkleTree()
        tree.levels = [PrefixedBytes(view[at : at + length]) for at, length in lay.levels]  # type: ignore[misc]
        hashes = HashColumn(prefix=view[lay.hashes : lay.hashes + n * _HASH])
        labels = LabelColumn(names=lay.label_names, prefix_codes=view[lay.label_codes : lay.label_codes + 4 * n])
        at, length = lay.texts
        texts = TextColumn(
            prefix=(
                view[at : at + length],
                view[lay.text_ends : lay.text_ends + 8 * n],
                view[lay.text_none : lay.text_none + n],
            )
        )
        return KnownPrefix(n, vectors, labels, texts, hashes, tree)

    def held_columns(self) -> HeldColumns:
        """The entries as ``first_mismatch`` rehashes them, from the memory files (the very
        bytes the workers answer from): the rows read a slice at a time, the other columns
        mapped read-only."""
        lay = self.layout
        n = lay.size
        view = memoryview(mmap.mmap(self.fd, lay.total, prot=mmap.PROT_READ)).toreadonly()
        at, length = lay.texts
        return HeldColumns(
            n,
            FileRows(self.rows_fd, n, lay.dim),  # read, not mapped: this process's RSS counts no row
            lay.label_names,
            view[lay.label_codes : lay.label_codes + 4 * n],
            view[at : at + length],
            view[lay.text_ends : lay.text_ends + 8 * n],
            view[lay.text_none : lay.text_none + n],
            view[lay.hashes : lay.hashes + n * _HASH],
        )

    def held_levels(self) -> list[memoryview]:
        """The tree's levels as the supervisor's check built them (mapped read-only)."""
        lay = self.layout
        view = memoryview(mmap.mmap(self.fd, lay.total, prot=mmap.PROT_READ)).toreadonly()
        return [view[at : at + length] for at, length in lay.levels]

    def lend_codes(self, substrate: PersistentSubstrate) -> bool:
        """Give the substrate's exact index the shared 8-bit codes as its shortlist (the one the
        service's pooled predicts scan), mapped copy-on-write; False when it takes none (an
        approximate or bounded substrate's index, or no codes were made)."""
        lay = self.layout
        index = substrate.system.index_
        if lay.codes is None or lay.shortlist is None or not isinstance(index, ExactIndex) or not index.borrowed:
            return False
        if len(index) < lay.size:
            return False
        codes = _private_buffer(self.fd, lay.codes, lay.size * lay.dim, (lay.code_rows, lay.dim), np.dtype(np.int8))
        index.adopt_shortlist(Int8Shortlist.from_snapshot(lay.dim, codes, lay.shortlist))
        return True


def _attach(rows_fd: Any, fd: Any, layout: Layout) -> SharedRows:
    """``SharedRows`` in the spawned process: what ``reduction.DupFd`` made of the descriptors."""
    return SharedRows(rows_fd.detach(), fd.detach(), layout)


class RowsRoom:
    """Shared memory with room for a ledger file's rows, for the supervisor's check to read
    them into (``build_state(shared=…)``, ``known_prefix``): ``publish`` then hands that very
    memory to the workers, without copying the rows, or backing a second copy of them."""

    def __init__(self, rows: int, dim: int):
        self.fd = os.memfd_create("ocrr-shared-rows", os.MFD_CLOEXEC)
        try:
            nbytes = max(rows * dim * F4LE.itemsize, _PAGE)
            os.ftruncate(self.fd, nbytes)
            self.buffer: np.ndarray | None = _mapped(self.fd, nbytes, (rows, dim), F4LE)
        except BaseException:
            os.close(self.fd)
            raise
        # No page is made before the scan writes it: the scan writes the rows it reads a block
        # at a time through ``fd`` (``KnownPrefix.rows_fd``), which fills each new page without
        # clearing it first.

    def known_prefix(self) -> KnownPrefix:
        """No entries, only the buffer their rows are read into. The stored inner Merkle nodes
        under the checkpoint are left to the pass that rehashes the entries taken on trust
        (``ocrr.service.rehash_trusted``), which compares them from the levels published."""
        assert self.buffer is not None, "the room was closed"
        return KnownPrefix(
            0,
            self.buffer,
            LabelColumn(),
            TextColumn(),
            HashColumn(),
            MerkleTree(),
            rows_fd=self.fd,
            inner_nodes_later=True,
        )

    def holds(self, rows: np.ndarray) -> bool:
        """Whether ``rows`` are this room's first rows (a scan read them into it)."""
        buf = self.buffer
        return buf is not None and len(rows) <= len(buf) and rows.ctypes.data == buf.ctypes.data

    def close(self) -> None:
        """Let go of the descriptor and of this object's view (unmapped once no view is left)."""
        if self.buffer is not None:
            self.buffer = None
            os.close(self.fd)


def room_for_rows(ledger: Any) -> RowsRoom | None:
    """A ``RowsRoom`` for the rows the ledger file at ``ledger`` says it commits (its meta
    table, read as it is now), or None: nothing to share (no entries, this system cannot,
    or the file cannot be read: the check that follows says why). An ``OcrrError`` when
    the rows would not fit in the memory left (``check_memory``)."""
    if not available():
        return None
    shape = stored_shape(ledger)
    if shape is None:
        return None
    size, dim = shape
    if type(size) is not int or type(dim) is not int or size <= 0 or not 0 < dim <= MAX_DIM:
        return None
    need = size * dim * F4LE.itemsize
    if need > _stored_bytes(Path(ledger)):
        return None  # more rows than the file and its log could hold: not sized from an unchecked claim
    check_memory(size, dim, "for the rows the workers share")
    return RowsRoom(size, dim)


def _stored_bytes(path: Path) -> int:
    """The bytes of the ledger file and of its write-ahead log, where its rows can be."""
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def publish(substrate: PersistentSubstrate, room: RowsRoom | None = None) -> SharedRows | None:
    """The entries ``substrate``'s ledger holds, checked (``open_checked``), written into new
    memory files; None when there are none or this system cannot share them (``available``).
    Codes them to 8 bits once when the substrate's searches would scan such codes. ``room``:
    where the check read the rows into (they are shared from there; else they are copied)."""
    mirror = getattr(substrate.ledger, "memory", None)
    if not available() or mirror is None or not len(mirror) or mirror.dim is None:
        return None
    n, dim = len(mirror), mirror.dim
    code_rows = room_at_open(n, _CODE_ROWS_AT_LEAST)
    codes_bytes = _whole_pages(code_rows * dim) if _codes_wanted(substrate.system) else 0
    rows_fd = _rows_file(mirror.vectors, room)
    fd = os.memfd_create("ocrr-shared-columns", os.MFD_CLOEXEC)
    try:
        # The 8-bit codes (first in the file) are made in a thread (numpy lets go of the GIL)
        # while this one lays out the other columns.
        with ThreadPoolExecutor(1, thread_name_prefix="ocrr-codes") as pool:
            os.ftruncate(fd, max(codes_bytes, _PAGE))  # grown below, once the other columns are placed
            coding = pool.submit(_code, fd, code_rows, dim, mirror.vectors) if codes_bytes else None
            held = chain_columns(mirror)  # the labels, texts and hashes as flat buffers
            tree = substrate.ledger.tree
            names, label_codes = held.label_names, held.label_codes
            text_blob, text_ends, text_none = held.text_blob, held.text_ends, held.text_none
            hashes_blob = held.hashes
            at = codes_bytes

            def place(nbytes: int) -> int:
                nonlocal at
                where, at = at, at + _whole_pages(nbytes)
                return where

            hashes_at = place(n * _HASH)
            levels = tuple((place(len(level)), len(level)) for level in tree.levels)
            codes_of_labels = place(4 * n)
            ends_at = place(8 * n)
            none_at = place(n)
            texts_at = place(len(text_blob))
            os.ftruncate(fd, max(at, _PAGE))  # the codes' spare rows stay a hole: no memory until written
            # Written, not copied through a mapping: a page a write fills whole is not cleared first.
            write_at(fd, hashes_blob, hashes_at)
            for (where, _length), level in zip(levels, tree.levels):
                write_at(fd, bytes(level) if isinstance(level, PrefixedBytes) else level, where)
            write_at(fd, label_codes, codes_of_labels)
            write_at(fd, text_ends, ends_at)
            write_at(fd, text_none, none_at)
            write_at(fd, text_blob, texts_at)
            snapshot = None if coding is None else coding.result()
    except BaseException:
        os.close(fd)
        os.close(rows_fd)
        raise
    layout = Layout(
        n,
        dim,
        0 if codes_bytes else None,
        code_rows,
        snapshot,
        hashes_at,
        levels,
        tuple(names),
        codes_of_labels,
        ends_at,
        none_at,
        (texts_at, len(text_blob)),
        max(at, _PAGE),
    )
    return SharedRows(rows_fd, fd, layout)


def _code(fd: int, code_rows: int, dim: int, rows: np.ndarray) -> dict:
    """Code ``rows`` to 8 bits into the memory file's first ``code_rows`` rows of ``dim``
    bytes; returns the shortlist's ``snapshot``."""
    with mmap.mmap(fd, _whole_pages(code_rows * dim)) as out:
        shortlist = Int8Shortlist(dim, np.frombuffer(out, np.int8, code_rows * dim).reshape(-1, dim))
        shortlist.catch_up(rows)
        snapshot = shortlist.snapshot()
        del shortlist  # (its codes are a view of the mapping: it closes once none is left)
    return snapshot


def _rows_file(rows: np.ndarray, room: RowsRoom | None) -> int:
    """A memory file whose first bytes are ``rows``: ``room``'s (a descriptor of its own) when
    the rows were read into it, else a new one they are copied into."""
    if room is not None and room.holds(rows):
        return os.dup(room.fd)
    fd = os.memfd_create("ocrr-shared-rows", os.MFD_CLOEXEC)
    try:
        nbytes = max(rows.nbytes, _PAGE)
        os.ftruncate(fd, nbytes)
        with mmap.mmap(fd, nbytes) as out:
            np.frombuffer(out, F4LE, rows.size)[:] = rows.reshape(-1)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _codes_wanted(system: Substrate) -> bool:
    """Whether the substrate's searches go through an 8-bit shortlist of every ledger row: an
    exact index over the ledger's own rows (``Substrate.fit_checked`` fits it so), which the
    service's pooled predicts scan (``service/pool.py``)."""
    own_steps = type(system).fit is Substrate.fit and type(system)._index_new is Substrate._index_new
    return own_steps and system.index_kind == "exact" and system.vectors_on_disk is None


def _whole_pages(nbytes: int) -> int:
    return -(-nbytes // _PAGE) * _PAGE


class _Region:
    """A private mapping this process appends rows into (see ``_private_buffer``)."""


def _mapped(fd: int, nbytes: int, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    """The memory file's first ``nbytes`` as a writable array of ``shape``, shared (what this
    process writes there, the processes mapping the file later see): the supervisor's, which
    a scan adopts as its rows (``APPENDABLE``: no process maps it before it is filled)."""
    assert _libc_mmap is not None and _libc_munmap is not None
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    base = _libc_mmap(None, nbytes, rw, mmap.MAP_SHARED, fd, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap of the shared rows failed")
    region = (ctypes.c_char * nbytes).from_address(base)
    setattr(region, APPENDABLE, True)
    weakref.finalize(region, _libc_munmap, base, nbytes)
    return np.ndarray(shape, dtype, buffer=memoryview(region))


def _private_buffer(fd: int, offset: int, shared_bytes: int, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    """A writable array of ``shape`` whose first ``shared_bytes`` are the memory file's from
    ``offset``, mapped copy-on-write (pages read stay shared with every process mapping them;
    a page written becomes this process's own), and whose rest is private anonymous memory,
    backed as rows land in it. Address space past it is reserved where the system allows
    (``reserved.room_to_grow``): the array then grows in place, its rows, shared ones
    included, staying where they are (copied into a buffer of twice the rows, the shared rows
    would become this process's own: a copy of every row per worker). Unmapped when the last
    array over it is gone."""
    assert _libc_mmap is not None and _libc_munmap is not None and _libc_madvise is not None
    nbytes = max(_whole_pages(int(np.prod(shape)) * dtype.itemsize), _PAGE)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    failed = ctypes.c_void_p(-1).value
    room = reserved.room_to_grow(nbytes)
    base = failed
    if room > nbytes:  # (refused under strict overcommit: then no room to grow)
        base = _libc_mmap(None, room, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
    if base in (None, failed):
        room = nbytes
        base = _libc_mmap(None, nbytes, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, failed):
        raise OSError(ctypes.get_errno(), "mmap of the rows' room failed")
    mapped = min(_whole_pages(shared_bytes), nbytes)
    if mapped:
        over = _libc_mmap(base, mapped, rw, mmap.MAP_PRIVATE | _MAP_FIXED, fd, offset)
        if over != base:
            _libc_munmap(base, room)
            raise OSError(ctypes.get_errno(), "mmap of the shared rows failed")
    if room > mapped:  # small pages past the shared rows: each backed as a row first lands in it
        _libc_madvise(base + mapped, room - mapped, _MADV_NOHUGEPAGE)
    region = (ctypes.c_char * room).from_address(base)
    setattr(region, APPENDABLE, True)  # Chain._from_stored adopts it as its buffer
    setattr(region, SMALL_PAGES, True)  # so neither its free tail nor its next capacity is backed ahead (grow_ahead)
    setattr(region, reserved.GROWS_IN_PLACE, room > nbytes)
    weakref.finalize(region, _libc_munmap, base, room)
    return np.ndarray(shape, dtype, buffer=memoryview(region))
