"""The entries a signed checkpoint vouches for, read a block of rows per statement.

A quick open (``verify="checkpoint"``) does not rehash the entries under the last
authenticated checkpoint: ``trusted_prefix`` reads them a block per statement, each column
concatenated by SQLite, and checks the blocks column by column (consecutive ids, links,
the kinds and widths of the stored values), while a thread reads the stored Merkle nodes
and builds the tree from the leaves. Anything unexpected returns None, and the caller
(``ocrr.ledger.sqlite.scan``) reads the entries again one by one, which names the first
bad one: this reading only has to be sound, never to explain.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ocrr.ledger.chain import GENESIS
from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.rows import rows_obey
from ocrr.ledger.sqlite.schema import connect
from ocrr.ledger.verify import HASH_SIZE
from ocrr.utils.files import write_at

__all__ = ["stored_nodes", "trusted_prefix"]

_F4LE = np.dtype("<f4")


class _NotIntact(Exception):
    """The column-wise reading of the trusted prefix found something to name: read it row by row."""


_NODES_PER_READ = 1 << 18  # stored nodes read per statement while building the tree
_PREFIX_BLOCK = 4096  # entries read per statement in trusted_prefix: its temporaries stay small and reused

# One block of entries, each column concatenated by SQLite (no Python object per row): the
# blobs' bytes as they are (``group_concat`` copies them; CAST back to a blob so that Python does
# not decode them), the labels and texts joined by NUL (a label or text holding a NUL splits into
# too many parts: the block is then read row by row), and the ids of the entries without text.
# Every aggregate of one statement sees the rows in one order, which the ids' list names; the
# sums count the rows whose values are of the kind and width a valid entry's are.
_ENTRIES_BLOCK = (
    "SELECT count(*), group_concat(id), sum(typeof(label) = 'text'), sum(typeof(text) IN ('text', 'null')), "
    "CAST(group_concat(label, char(0)) AS BLOB), CAST(group_concat(coalesce(text, ''), char(0)) AS BLOB), "
    "group_concat(CASE WHEN text IS NULL THEN id END), sum(typeof(vector) = 'blob' AND length(vector) = ?), "
    "sum(typeof(prev_hash) = 'blob' AND length(prev_hash) = 32), sum(typeof(hash) = 'blob' AND length(hash) = 32), "
    "CAST(group_concat(vector, '') AS BLOB), CAST(group_concat(prev_hash, '') AS BLOB), "
    "CAST(group_concat(hash, '') AS BLOB) FROM entries WHERE id >= ? AND id < ?"
)
# The stored nodes of one level over positions lo..hi-1, the same way.
_NODES_BLOCK = (
    "SELECT count(*), group_concat(idx), sum(typeof(hash) = 'blob' AND length(hash) = 32), "
    "CAST(group_concat(hash, '') AS BLOB) FROM nodes WHERE level = ? AND idx >= ? AND idx < ?"
)


def trusted_prefix(
    conn: sqlite3.Connection,
    trusted: int,
    width: int,
    vectors: np.ndarray | None,
    vectors_fd: int | None = None,
    inner_nodes: bool = True,
) -> tuple[MerkleTree, LabelColumn, TextColumn, HashColumn, bool] | None:
    """Entries ``0..trusted-1`` (vouched for by an authenticated checkpoint, so not rehashed)
    read a block of rows per statement, their vectors copied into ``vectors`` (None: not kept,
    nor their labels and texts; ``vectors_fd``: the memory file ``vectors`` maps from its
    start, written with ``pwrite``, ``KnownPrefix.rows_fd``), with the checks
    the row-by-row reading makes of them, made over whole columns: consecutive ids, labels and
    texts stored as text, vectors of ``width`` float32, links, 32-byte hashes, the stored
    leaves, and the stored nodes over them equal to the tree the leaves build. Returns (tree,
    labels, texts, hashes, rows_obey): the last True when every row copied into ``vectors``
    obeys ``ocrr.ledger.rows.check_rows`` (checked by the readers while they held it, so that
    the open need not read them all again). None when any check fails or a value cannot be
    read: the caller then reads every entry one by one, which names the first bad one. ``inner_nodes``
    False: the stored nodes above the leaves are not compared here (the caller compares them
    later: ``ocrr.ledger.sqlite.inner_nodes``)."""
    try:
        return _read_prefix(conn, trusted, width, vectors, vectors_fd, inner_nodes)
    except (_NotIntact, sqlite3.Error, TypeError, ValueError):
        return None


def _read_prefix(
    conn: sqlite3.Connection,
    trusted: int,
    width: int,
    vectors: np.ndarray | None,
    vectors_fd: int | None,
    inner_nodes: bool,
) -> tuple[MerkleTree, LabelColumn, TextColumn, HashColumn, bool]:
    labels, texts, hashes = LabelColumn(), TextColumn(), HashColumn()
    prev = GENESIS
    blocks = [(lo, min(lo + _PREFIX_BLOCK, trusted)) for lo in range(0, trusted, _PREFIX_BLOCK)]
    # The blocks are fetched by readers of their own and checked here, in order, while a thread
    # reads the stored nodes on ``conn`` and builds the tree (SQLite lets go of the GIL while it
    # reads). Without readers of their own the blocks are read on ``conn``: the tree comes first.
    with (
        _BlockReaders(conn, width, vectors, vectors_fd) as readers,
        ThreadPoolExecutor(1, thread_name_prefix="ocrr-tree") as pool,
    ):
        building = pool.submit(_prefix_tree, conn, trusted, inner_nodes) if readers.own else None
        tree = _prefix_tree(conn, trusted, inner_nodes) if building is None else None
        try:
            for (lo, hi), got in zip(blocks, readers.fetch(blocks)):
                block_labels, block_texts, _rows, chain = _read_block(got, lo, hi, width, prev)
                if vectors is not None:  # (its rows are there: the reader put them)
                    labels.extend(block_labels)
                    texts.extend_blob(*block_texts)
                hashes.extend_bytes(chain)
                prev = chain[-32:]
        finally:
            if building is not None:
                tree = building.result()  # (also when reading failed: the thread ends first)
    assert tree is not None
    return tree, labels, texts, hashes, vectors is not None and readers.rows_obey


def _prefix_tree(conn: sqlite3.Connection, trusted: int, inner_nodes: bool = True) -> MerkleTree:
    """The tree of the stored leaves ``0..trusted-1``; ``_NotIntact`` unless every stored node
    over them is the one those leaves build (``inner_nodes`` False: the leaves alone are read)."""
    leaves = bytearray(HASH_SIZE * trusted)
    for lo, hi in _spans(trusted):
        leaves[lo * HASH_SIZE : hi * HASH_SIZE] = _stored_nodes(conn, 0, lo, hi)
    tree = MerkleTree.from_leaves(leaves, own=True)
    for level in range(1, len(tree.levels) if inner_nodes else 1):
        with memoryview(tree.levels[level]) as built:
            for lo, hi in _spans(trusted >> level):
                if _stored_nodes(conn, level, lo, hi) != built[lo * HASH_SIZE : hi * HASH_SIZE]:
                    raise _NotIntact
    return tree


def _spans(n: int) -> Iterator[tuple[int, int]]:
    """``0..n-1`` in reads of ``_NODES_PER_READ`` stored nodes (one read of a level of ten
    million held its hashes, their ids as text and SQLite's copies of both at once)."""
    return ((lo, min(n, lo + _NODES_PER_READ)) for lo in range(0, n, _NODES_PER_READ))


class _BlockReaders:
    """Fetch blocks of entries (``_ENTRIES_BLOCK``) on connections of their own, a few blocks
    ahead of the caller, who gets them in order: two readers keep both cores reading the file.
    When the file cannot be opened again, the caller's connection reads them, in its thread.
    A block's rows of the right length are copied into ``into`` (its rows lo..hi-1) as it is
    read, by ``pwrite`` to ``into_fd`` when given (the memory file ``into`` maps from its start),
    and checked against the rows' rules while at hand (``rows_obey``: False once a block's rows
    break them or were not copied); the caller checks the block before any of them is used."""

    READERS, AHEAD = 2, 4

    def __init__(
        self, conn: sqlite3.Connection, width: int, into: np.ndarray | None = None, into_fd: int | None = None
    ):
        self._conn, self._row_bytes, self._width, self._into = conn, width * _F4LE.itemsize, width, into
        self._into_fd = into_fd
        self.rows_obey = into is not None
        self.own = _more_connections(conn, self.READERS)
        self._free, self._lock, self._local = list(self.own), threading.Lock(), threading.local()
        self._pool = (
            ThreadPoolExecutor(len(self.own), thread_name_prefix="ocrr-read", initializer=self._claim)
            if self.own
            else None
        )

    def _claim(self) -> None:
        with self._lock:
            self._local.conn = self._free.pop()

    def _read(self, conn: sqlite3.Connection | None, lo: int, hi: int) -> tuple:
        got = (conn or self._local.conn).execute(_ENTRIES_BLOCK, (self._row_bytes, lo, hi)).fetchone()
        rows = got[10]
        if self._into is None:
            return got
        if not (isinstance(rows, bytes) and len(rows) == (hi - lo) * self._row_bytes):
            self.rows_obey = False
            return got
        block = np.frombuffer(rows, _F4LE).reshape(hi - lo, self._width)
        if self._into_fd is None:
            self._into[lo:hi] = block  # (numpy lets go of the GIL)
        else:
            write_at(self._into_fd, rows, lo * self._row_bytes)  # (a page it fills whole is not cleared first)
        if not rows_obey(block):  # (only ever set False, from any reader)
            self.rows_obey = False
        return got

    def fetch(self, blocks: list[tuple[int, int]]) -> Iterator[tuple]:
        """Each block's row, in the order given."""
        if self._pool is None:
            for lo, hi in blocks:
                yield self._read(self._conn, lo, hi)
            return
        pending: deque[Future] = deque()
        for lo, hi in blocks:
            pending.append(self._pool.submit(self._read, None, lo, hi))
            if len(pending) > self.AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def __enter__(self) -> _BlockReaders:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for conn in self.own:
            conn.close()


def _more_connections(conn: sqlite3.Connection, count: int) -> list[sqlite3.Connection]:
    """``count`` read-only connections to the file ``conn`` has open ([] if there is none, or
    it cannot be opened again)."""
    name = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
    opened: list[sqlite3.Connection] = []
    try:
        while name and len(opened) < count:
            opened.append(connect(Path(name), readonly=True))
    except sqlite3.Error:
        for extra in opened:
            extra.close()
        return []
    return opened


def _read_block(
    got: tuple, lo: int, hi: int, width: int, prev: bytes
) -> tuple[list[str], tuple[bytes, np.ndarray, bytes], bytes, bytes]:
    """Entries ``lo..hi-1`` as ``_ENTRIES_BLOCK`` read them, checked (``_NotIntact`` unless each
    is as a valid entry's and the first links to ``prev``): their labels, their texts as
    ``TextColumn.extend_blob`` takes them (UTF-8 bytes checked to decode, concatenated; where
    each ends; which are None), rows' bytes and chain hashes' bytes."""
    n, row_bytes = hi - lo, width * _F4LE.itemsize
    count, ids, labels_ok, texts_ok, labels, texts, no_text, rows_ok, links_ok, hashes_ok, rows, links, chain = got
    if count != n or ids != _ids(lo, hi) or not labels_ok == texts_ok == rows_ok == links_ok == hashes_ok == n:
        raise _NotIntact
    if len(rows) != n * row_bytes or len(chain) != 32 * n or links != prev + chain[:-32]:  # each links back
        raise _NotIntact
    texts.decode("utf-8")  # (UnicodeDecodeError, a ValueError: read row by row, which names it)
    block_labels = labels.decode("utf-8").split("\0")
    # The texts' n - 1 separators (a text holding a NUL makes more): each text ends where its
    # separator is, less the separators before it.
    separators = np.flatnonzero(np.frombuffer(texts, np.uint8) == 0)
    if len(block_labels) != n or len(separators) != n - 1:
        raise _NotIntact
    ends = np.append(separators, len(texts)) - np.arange(n)
    none = np.zeros(n, np.uint8)
    if no_text is not None:
        missing = np.asarray([int(i) - lo for i in no_text.split(",")], np.int64)
        starts = np.concatenate(([0], ends[:-1]))
        if ((missing < 0) | (missing >= n)).any() or (ends[missing] != starts[missing]).any():
            raise _NotIntact  # (a NULL text reads as '': an id out of the block or a text there cannot be)
        none[missing] = 1
    return block_labels, (texts.replace(b"\0", b""), ends, none.tobytes()), rows, chain


def stored_nodes(conn: sqlite3.Connection, level: int, lo: int, hi: int) -> bytes | None:
    """The stored hashes of nodes ``lo..hi-1`` of ``level``, concatenated, or None unless each
    is there once, as 32 bytes."""
    try:
        return _stored_nodes(conn, level, lo, hi)
    except _NotIntact:
        return None


def _stored_nodes(conn: sqlite3.Connection, level: int, lo: int, hi: int) -> bytes:
    """The stored hashes of nodes ``lo..hi-1`` of ``level``, concatenated (``_NotIntact``
    unless each is there once, as 32 bytes)."""
    count, positions, intact, nodes = conn.execute(_NODES_BLOCK, (level, lo, hi)).fetchone()
    if count != hi - lo or intact != count or positions != _ids(lo, hi) or len(nodes) != 32 * count:
        raise _NotIntact
    return nodes


_IDS_CHUNK = 1 << 20  # numbers written per numpy pass in _ids: a few MB of temporaries


def _ids(lo: int, hi: int) -> str:
    """``group_concat`` of the ids lo..hi-1 in order: ``",".join(map(str, range(lo, hi)))``,
    written digit by digit with numpy (the open compares one such string per block and per
    tree level, and joining Python's strings of ten million numbers held the GIL for seconds)."""
    parts = []
    start = lo
    while start < hi:
        digits = len(str(start))
        end = min(hi, 10**digits, start + _IDS_CHUNK)  # start..end-1 all have ``digits`` digits
        numbers = np.arange(start, end, dtype=np.uint64)
        text = np.empty((end - start, digits + 1), np.uint8)
        for k in range(digits - 1, -1, -1):
            numbers, text[:, k] = np.divmod(numbers, 10)
        text[:, :digits] += ord("0")
        text[:, digits] = ord(",")
        parts.append(text.tobytes())
        start = end
    return b"".join(parts)[:-1].decode("ascii")
