"""The in-memory hash chain: a SHA-256 hash-chained, append-only list of labelled vectors.

The OCRR substrate stores every user correction here (``ocrr.ledger.Ledger`` is this chain
plus its file: ``ocrr.ledger.sqlite.file``). Each entry's hash covers
its own fields plus the previous entry's hash, so editing, deleting, reordering
or inserting any past entry breaks the chain and ``verify()`` says where.
Truncating the tail leaves a valid (shorter) chain; that is only caught when
the caller passes the last head it held (``verify(expected_head=...)``).

Vectors live in one contiguous, capacity-doubling float32 buffer so appends
are amortised O(1) and retrieval can do a single matrix product over
``Chain.vectors``. ``Chain(dim, vectors_on_disk=folder)`` puts that buffer in a
memory-mapped scratch file instead of RAM (10M x 384 float32 is 15.4 GB): the OS
pages vectors in when a scan or ``verify`` reads them, and the resident set holds only
the per-entry metadata and whatever index sits beside the ledger.

The per-entry metadata is compact (``ocrr.ledger.columns``): hashes, labels and texts in flat
buffers, no Python object per entry. An entry's id is its position and its ``prev_hash`` the
hash before it; only a ledger built from stored columns that say otherwise (a damaged file
read as it is, for ``verify`` to name) keeps those two columns as lists.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn, hash_column, label_column, text_column
from ocrr.ledger.verify import entry_head
from ocrr.utils import grow_ahead, reserved
from ocrr.utils.grow_ahead import GrowAhead

__all__ = ["GENESIS", "Chain", "Entry", "VerifyResult", "entry_digest"]

#: prev_hash of entry 0: a fixed value, so a chain cannot start anywhere else.
GENESIS: bytes = hashlib.sha256(b"ocrr-ledger-genesis-v1").digest()

F4LE = np.dtype("<f4")  # fixed byte order, so digests agree across machines
INITIAL_CAPACITY = 64


def entry_digest(id: int, label: str, text: str | None, vector: np.ndarray, prev_hash: bytes) -> bytes:
    """SHA-256 of one entry's canonical encoding (``ocrr.ledger.verify.entry_bytes``: every
    field length-prefixed, so no two field tuples share an encoding); used by append and verify."""
    vec = np.ascontiguousarray(vector, dtype=F4LE)
    if vec.ndim != 1:
        raise ValueError(f"vector must be 1-D, got shape {vec.shape}")
    if len(prev_hash) != 32:
        raise ValueError(f"prev_hash must be 32 bytes, got {len(prev_hash)}")
    h = hashlib.sha256(entry_head(id, label, text, vec.shape[0]))
    h.update(vec.data)  # raw bytes via the buffer protocol: no copy, no text
    h.update(prev_hash)
    return h.digest()


@dataclass(frozen=True, eq=False)
class Entry:
    """One ledger entry as stored. ``vector`` is a read-only float32 view."""

    id: int
    label: str
    text: str | None
    vector: np.ndarray = field(repr=False)
    prev_hash: bytes
    hash: bytes

    def __eq__(self, other: object) -> bool:
        # Bit-exact: a vector compares by its bytes, so NaN == NaN, -0.0 != 0.0.
        if not isinstance(other, Entry):
            return NotImplemented
        fields = (self.id, self.label, self.text, self.prev_hash, self.hash, self.vector.shape)
        others = (other.id, other.label, other.text, other.prev_hash, other.hash, other.vector.shape)
        return fields == others and self.vector.tobytes() == other.vector.tobytes()

    def __hash__(self) -> int:
        return hash(self.hash)


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of ``Ledger.verify``; truthy iff the chain is intact.

    ``first_bad`` is the index of the first entry that fails. For a head
    mismatch it is the first index past what the caller expected: the
    ledger's length when the held head is not in the chain (tail truncated or
    history rewritten), or the first extra entry when the chain runs past it.
    """

    ok: bool
    first_bad: int | None
    reason: str

    def __bool__(self) -> bool:
        return self.ok


class Chain:
    """Append-only, hash-chained store of (vector, label, text) entries, in memory.

    Users hold its subclass ``ocrr.ledger.Ledger``, which adds the file behind it
    (``Ledger.open``, ``save``, ``load``); a durable store's mirror is a plain ``Chain``.
    """

    def __init__(self, dim: int | None = None, vectors_on_disk: str | os.PathLike[str] | None = None) -> None:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1):
            raise OcrrError(f"dim must be a positive integer, got {dim!r}; pass e.g. Ledger(dim=384) or leave it None")
        self._dim: int | None = None if dim is None else int(dim)
        self._n = 0
        # vectors_on_disk: the vector buffer is an anonymous file in this folder (unlinked at
        # once, so nothing is left behind), memory-mapped; None keeps it in RAM.
        self._vec_file: IO[bytes] | None = None
        if vectors_on_disk is not None:
            folder = Path(vectors_on_disk).expanduser()
            if not folder.is_dir():
                raise OcrrError(
                    f"vectors_on_disk={str(folder)!r} is not an existing folder; create it or pass "
                    "another folder with room for the vectors (4 x dim bytes per entry)"
                )
            self._vec_file = tempfile.TemporaryFile(prefix="ocrr-ledger-vectors-", dir=folder)
        # Parallel per-entry columns (lists only for stored values no column holds: a damaged
        # file's). ids and prev hashes are implied (position, the hash before) unless stored
        # columns said otherwise (_from_stored): then they are lists, so verify() names them.
        self._buf: np.ndarray | None = None
        self._ro: np.ndarray | None = None  # read-only view of _buf, handed out to callers
        self._ahead: GrowAhead | None = None  # set by grow_ahead()
        if self._dim is not None:
            self._set_buffer(self._allocate(INITIAL_CAPACITY, self._dim))
        self._ids: list[int] | None = None
        self._labels: LabelColumn | list = LabelColumn()
        self._texts: TextColumn | list = TextColumn()
        self._prev: list[bytes] | None = None
        self._hashes: HashColumn | list = HashColumn()
        self._head = GENESIS  # the last hash (kept apart: the append path reads it every time)

    # ------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Entry:
        n = self._n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"ledger index {i} out of range for {n} entries")
        return Entry(self._id(i), self._labels[i], self._texts[i], self._view()[i], self._prev_of(i), self._hashes[i])

    def _id(self, i: int) -> int:
        return i if self._ids is None else self._ids[i]

    def _prev_of(self, i: int) -> bytes:
        if self._prev is not None:
            return self._prev[i]
        return self._hashes[i - 1] if i else GENESIS

    def __iter__(self) -> Iterator[Entry]:
        for i in range(self._n):
            yield self[i]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self._n}, dim={self._dim}, head={self.head.hex()[:16]}…)"

    # Pickle: numpy pickles a view as a separate copy, so _ro would stop tracking _buf
    # (appends after unpickling then hashed and served stale rows). Rebuild the view.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_ro"] = None
        state["_ahead"] = None  # its thread and spare buffer stay behind
        if self._vec_file is not None:  # the copy holds its vectors in memory
            state["_vec_file"] = None
            if self._buf is not None:  # None: no dim yet, so no vectors to copy
                state["_buf"] = np.array(self._buf[: max(self._n, 1)])
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_vec_file", None)
        state.setdefault("_ahead", None)
        self.__dict__.update(state)
        if "_head" not in state:  # pickled before the head was kept apart
            self._head = self._hashes[self._n - 1] if self._n else GENESIS
        if self._buf is not None:
            self._set_buffer(self._buf)

    @property
    def dim(self) -> int | None:
        return self._dim

    @property
    def head(self) -> bytes:
        """Hash of the last entry, or GENESIS when empty. Keep it to detect truncation."""
        return self._head

    @property
    def vectors(self) -> np.ndarray:
        """Read-only (n, dim) float32 view of all vectors in id order."""
        if self._ro is None:
            empty = np.empty((0, 0), F4LE)
            empty.flags.writeable = False
            return empty
        return self._ro[: self._n]

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self._labels)

    def label_of(self, i: int) -> str:
        """Entry ``i``'s label, without building the Entry (a service names 5 neighbours per query)."""
        return self._labels[i]

    def stored_columns(self) -> tuple[Sequence, Sequence, Sequence]:
        """The labels, texts and chain hashes of every entry, in id order: the chain's own
        columns (``ocrr.ledger.columns``), not copies (read them, do not change them; for a
        caller handing the chain on whole)."""
        return self._labels, self._texts, self._hashes

    @property
    def vector_buffer_bytes(self) -> int:
        """Bytes of the vector buffer as allocated (capacity, not just the live rows)."""
        return 0 if self._buf is None else int(self._buf.nbytes)

    # ------------------------------------------------------------ appending
    def append(self, vector: np.ndarray | Sequence[float], label: str, text: str | None = None) -> Entry:
        """Add one entry and return it. Accepts shape (d,) or (1, d)."""
        vec = _as_float32(vector)
        if vec.ndim != 1:
            if vec.ndim == 2 and vec.shape[0] == 1:
                vec = vec[0]
            else:
                raise OcrrError(
                    f"append takes one vector of shape (d,) or (1, d), got shape {vec.shape}; use extend() for several"
                )
        if np.count_nonzero(np.isfinite(vec)) != vec.size:  # cheaper than .all() on one row
            raise OcrrError("vector contains NaN or inf; check the encoder output before appending")
        n = self.append_checked(vec, label, text)
        return Entry(n, label, text, self._view()[n], self._prev_of(n), self._hashes[n])

    def append_checked(self, vec: np.ndarray, label: str, text: str | None) -> int:
        """Append one entry whose vector the caller already checked (a finite 1-D float32
        array: ``append`` here, or a system that validated its batch); return its id.
        No Entry object is built: this is the path one correction takes."""
        self._check_open()
        _check_label_text(label, text)
        n = self._n
        buf = self._buf  # None until the dim is known, and then vec.shape[0] != self._dim
        if buf is None or vec.shape[0] != self._dim or n == buf.shape[0]:
            buf = self._reserve(vec.shape[0], 1)
        buf[n] = vec  # slot n is past the visible end, so a failure below leaves no trace
        row = buf[n]  # hashed only: a caller gets rows of the read-only view
        prev = self._head
        digest = _digest_or_raise(n, label, text, row, prev)
        if self._ids is not None:
            self._ids.append(n)
        if self._prev is not None:
            self._prev.append(prev)
        self._labels.append(label)
        self._texts.append(text)
        self._hashes.append(digest)
        self._head = digest
        self._n = n + 1
        return n

    def extend(
        self,
        vectors: np.ndarray | Sequence[Sequence[float]],
        labels: Sequence[str],
        texts: Sequence[str | None] | None = None,
    ) -> range:
        """Append many entries at once (all or nothing); returns their ids."""
        self._check_open()
        mat = _as_float32(vectors)
        if mat.ndim != 2:
            raise OcrrError(
                f"extend takes a 2-D array of shape (m, d), got shape {mat.shape}; use append() for one vector"
            )
        m = mat.shape[0]
        if len(labels) != m or (texts is not None and len(texts) != m):
            got = f"{len(labels)} labels" + ("" if texts is None else f" and {len(texts)} texts")
            raise OcrrError(f"extend got {m} vectors but {got}; pass one label (and text) per vector")
        if texts is None:
            texts = [None] * m
        for label, text in zip(labels, texts):
            _check_label_text(label, text)
        bad = _first_not_finite(mat)
        if bad is not None:
            raise OcrrError(f"vector {bad} contains NaN or inf; check the encoder output before appending")
        return self._extend(mat, labels, texts, None)

    def extend_hashed(
        self, vectors: np.ndarray, labels: Sequence[str], texts: Sequence[str | None], hashes: Sequence[bytes]
    ) -> range:
        """``extend`` of entries whose chain hashes the caller computed from these very fields,
        chained on from this ledger's head (a durable store's commit, written and checked):
        they are taken as given instead of hashed again. ``vectors``: finite (m, d) float32."""
        self._check_open()
        if not len(hashes) == len(labels) == len(texts) == len(vectors) or any(len(h) != 32 for h in hashes):
            raise ValueError(f"extend_hashed takes one 32-byte hash per entry, got {len(hashes)} for {len(labels)}")
        return self._extend(vectors, labels, texts, list(hashes))

    def _extend(self, mat: np.ndarray, labels: Sequence[str], texts: Sequence[str | None], hashes) -> range:
        """Add checked entries; hash each (``hashes`` None) or take their given hashes."""
        m = mat.shape[0]
        start = self._n
        if m == 0:
            return range(start, start)
        block = self._reserve(mat.shape[1], m)[start : start + m]
        if block.ctypes.data != mat.ctypes.data or block.strides != mat.strides:  # (in place: an open read them there)
            block[:] = mat
        head = self.head
        if hashes is None:
            prev = head
            digests: list[bytes] = []
            for j in range(m):
                prev = _digest_or_raise(start + j, labels[j], texts[j], block[j], prev)
                digests.append(prev)
        else:
            digests = hashes
        if self._ids is not None:
            self._ids.extend(range(start, start + m))
        if self._prev is not None:
            self._prev.extend([head, *digests[:-1]])
        self._texts.extend(texts)  # first: the one that can refuse a value (a text of the wrong type)
        self._labels.extend(labels)
        self._hashes.extend(digests)
        self._head = digests[-1]
        self._n = start + m
        return range(start, start + m)

    def _check_open(self) -> None:
        """Raise if this chain takes no more entries: never here; a ``Ledger`` refuses once closed."""

    def _reserve(self, d: int, extra: int) -> np.ndarray:
        """Fix dim on first use and make room for ``extra`` more rows; return the buffer."""
        if self._dim is None:
            if d < 1:
                raise OcrrError("vector is empty; pass a vector with at least one component")
            self._dim = d
            self._set_buffer(self._allocate(max(INITIAL_CAPACITY, extra), d))
        elif d != self._dim:
            raise OcrrError(
                f"vector has dimension {d} but this ledger holds dimension {self._dim}; "
                "use the same encoder for every entry"
            )
        buf = self._buffer()
        need = self._n + extra
        cap = buf.shape[0]
        if need > cap:
            grown = self._ahead.take(buf, self._n, need) if self._ahead is not None else None
            if grown is None:
                while cap < need:
                    cap *= 2
                grown = self._allocate(cap, self._dim)
                # a file-backed or reserved buffer grows in place: its rows are already there
                if self._vec_file is None and grown.ctypes.data != buf.ctypes.data:
                    grown[: self._n] = buf[: self._n]
            self._set_buffer(grown)  # old views keep the old buffer alive; its rows never change
            buf = grown
        if self._ahead is not None:
            self._ahead.watch(buf, self._n)
        return buf

    def grow_ahead(self) -> None:
        """From now on, make each bigger vector buffer in a background thread before this one
        fills (``ocrr.utils.grow_ahead``), so an append never waits for fresh memory: for a
        long-lived ledger that answers requests while it grows (``ocrr serve``). Capacities
        and contents are those of growing in place. A no-op for vectors on disk."""
        if self._vec_file is None and self._ahead is None:
            self._ahead = GrowAhead()
            if self._buf is not None:
                self._ahead.watch(self._buf, self._n)

    def _allocate(self, rows: int, dim: int) -> np.ndarray:
        """An uninitialised (rows, dim) buffer: in RAM, or the whole scratch file re-mapped
        at the new size (growing a file keeps its first rows; the tail is a sparse hole)."""
        if self._vec_file is None:
            if rows * dim * F4LE.itemsize >= grow_ahead.MIN_BYTES:  # big enough for its growth to cost
                grown = reserved.grow(self._buf, rows, (dim,), F4LE)  # in place when the rows fit
                if grown is not None:
                    return grown
            return np.empty((rows, dim), F4LE)
        size = rows * dim * F4LE.itemsize
        try:
            if os.fstat(self._vec_file.fileno()).st_size < size:
                self._vec_file.truncate(size)
        except OSError as e:
            raise OcrrError(
                f"cannot grow the ledger's vector file to {size / 1e9:.1f} GB ({e}); free disk space "
                "or pass another vectors_on_disk folder"
            ) from e
        return np.memmap(self._vec_file, dtype=F4LE, mode="r+", shape=(rows, dim))

    @property
    def on_disk(self) -> bool:
        """True when the vectors live in a memory-mapped file (``vectors_on_disk``)."""
        return self._vec_file is not None

    def _set_buffer(self, buf: np.ndarray) -> None:
        self._buf = buf
        self._ro = buf.view()
        self._ro.flags.writeable = False

    def _buffer(self) -> np.ndarray:
        """The writable vector buffer, which exists once the dim is known (given, or the first entry's)."""
        assert self._buf is not None, "no vector buffer before the ledger's dim is known"
        return self._buf

    def _view(self) -> np.ndarray:
        """The read-only view of the vector buffer (exists when ``_buffer`` does)."""
        assert self._ro is not None, "no vector buffer before the ledger's dim is known"
        return self._ro

    # ------------------------------------------------------------ verifying
    def verify(self, expected_head: bytes | None = None) -> VerifyResult:
        """Recompute every digest from the stored fields and check the links.

        Pass the last ``head`` you held as ``expected_head`` to also catch a
        truncated (or secretly extended) tail.
        """
        if expected_head is not None and (not isinstance(expected_head, bytes) or len(expected_head) != 32):
            raise OcrrError("expected_head must be the 32-byte value of Ledger.head; pass the head you saved earlier")
        ids, labels, texts, vecs = self._ids, self._labels, self._texts, self.vectors
        prevs, hashes = self._prev, self._hashes
        prev = GENESIS
        for i in range(self._n):
            if ids is not None and ids[i] != i:
                return VerifyResult(False, i, f"entry {i}: id is {ids[i]!r}, expected {i} (deleted or reordered entry)")
            if prevs is not None and prevs[i] != prev:
                link = "the genesis value" if i == 0 else f"entry {i - 1}"
                return VerifyResult(False, i, f"entry {i}: prev_hash does not link to {link}")
            if not isinstance(labels[i], str) or not (texts[i] is None or isinstance(texts[i], str)):
                return VerifyResult(False, i, f"entry {i}: label or text is not a string (stored fields edited)")
            digest = hashes[i]
            if entry_digest(i, labels[i], texts[i], vecs[i], prev) != digest:
                return VerifyResult(
                    False, i, f"entry {i}: stored hash does not match its contents (label, text or vector changed)"
                )
            prev = digest
        if expected_head is not None and expected_head != prev:
            try:
                first_bad = hashes.index(expected_head) + 1  # chain runs past the held head
            except ValueError:
                first_bad = self._n  # held head not in the chain: tail cut off or history rewritten
            return VerifyResult(
                False,
                first_bad,
                f"head mismatch: chain ends at {prev.hex()[:16]}… but caller holds "
                f"{expected_head.hex()[:16]}… (tail truncated or extended)",
            )
        return VerifyResult(True, None, f"ok: {self._n} entries, chain intact")

    # ------------------------------------------------------------ internals
    @classmethod
    def _from_stored(
        cls,
        dim: int | None,
        ids: Sequence[int] | None,
        labels: Sequence,
        texts: Sequence,
        vectors: np.ndarray,
        prevs: Sequence[bytes] | None,
        hashes: Sequence[bytes],
        adopt: bool = False,
    ) -> Self:
        """Build a chain from stored columns as-is: no hashing, no checks (a durable store's
        mirror of the entries it checked, and the seam the tests use to build tampered ledgers).
        ``ids`` / ``prevs`` None: the entries' positions / each one's previous hash (GENESIS
        first), as in every intact ledger. ``adopt``: when ``vectors`` are the first rows of a
        writable float32 buffer nobody else writes (what a scan of the file reads into), that
        buffer becomes the chain's, not a copy. Columns (``ocrr.ledger.columns``) are taken
        with their read-only prefix shared, not copied."""
        chain = cls(dim)
        n = len(hashes) if ids is None else len(ids)
        if n:
            assert dim is not None, "stored entries come with their dim"
            buf = _whole_buffer(vectors, dim) if adopt else None
            if buf is None:
                buf = np.empty((max(INITIAL_CAPACITY, n), dim), F4LE)
                buf[:n] = vectors
            chain._set_buffer(buf)
        chain._take_columns(ids, labels, texts, prevs, hashes)
        chain._n = n
        return chain

    def _take_columns(
        self,
        ids: Sequence[int] | None,
        labels: Sequence,
        texts: Sequence,
        prevs: Sequence[bytes] | None,
        hashes: Sequence[bytes],
    ) -> None:
        """Hold these stored columns (as ``_from_stored`` takes them) compactly."""
        n = len(hashes)
        self._labels, self._texts, self._hashes = label_column(labels), text_column(texts), hash_column(hashes)
        self._ids = None if ids is None or _are_positions(ids, n) else list(ids)
        self._prev = None if prevs is None or _link(prevs, self._hashes, n) else list(prevs)
        self._head = self._hashes[-1] if n else GENESIS


#: The attribute, true, of a memory object a numpy buffer is built over (``np.ndarray(buffer=…)``)
#: when that memory is this process's own to append rows into although numpy does not own it
#: (a private, copy-on-write mapping: ``ocrr.service.shared_rows``); ``_from_stored`` adopts it.
APPENDABLE = "ocrr_appendable_rows"


def _whole_buffer(rows: np.ndarray, dim: int) -> np.ndarray | None:
    """The array whose leading rows ``rows`` are, if it is a writable C-ordered float32 buffer
    of ``dim`` columns (so appends can go on in place past them); None otherwise."""
    base = rows.base if isinstance(rows.base, np.ndarray) else rows
    usable = (
        base.ndim == 2
        and base.shape[1] == dim
        and base.dtype == F4LE
        and base.flags.c_contiguous
        and base.flags.writeable
        # owns its memory (not a view of something else), or rows this process mapped for itself
        # to append into (``APPENDABLE``: copy-on-write over rows shared with other processes)
        and (base.base is None or getattr(base.base, APPENDABLE, False))
        and rows.shape[0] <= base.shape[0]
        and rows.ctypes.data == base.ctypes.data
        and rows.flags.c_contiguous
    )
    return base if usable else None


_FINITE_BLOCK = 65_536  # rows checked at a time: the check's mask stays small beside rows on disk


def _first_not_finite(mat: np.ndarray) -> int | None:
    """The first row of ``mat`` holding NaN or inf, or None."""
    for lo in range(0, len(mat), _FINITE_BLOCK):
        finite = np.isfinite(mat[lo : lo + _FINITE_BLOCK]).all(axis=1)
        if not finite.all():
            return lo + int(np.flatnonzero(~finite)[0])
    return None


def _are_positions(ids: Sequence[int], n: int) -> bool:
    """Whether ``ids`` are 0..n-1 in order, exactly (ints, not just equal values)."""
    if isinstance(ids, range):
        return ids == range(n)
    return len(ids) == n and all(type(v) is int and v == i for i, v in enumerate(ids))


def _link(prevs: Sequence[bytes], hashes: Sequence, n: int) -> bool:
    """Whether each of ``prevs`` is the hash before it (GENESIS first): what ``_prev_of`` says."""
    if len(prevs) != n:
        return False
    if not n:
        return True
    if type(prevs[0]) is not bytes or prevs[0] != GENESIS:
        return False
    blob = b"".join(prevs[1:]) if all(type(p) is bytes and len(p) == 32 for p in prevs) else None
    if isinstance(hashes, HashColumn):
        return blob is not None and blob == hashes.to_bytes()[: 32 * (n - 1)]
    return all(type(p) is bytes and p == h for p, h in zip(prevs[1:], hashes))


def _check_label_text(label: object, text: object) -> None:
    if not isinstance(label, str) or not label:
        raise OcrrError(f"label must be a non-empty string, got {label!r}; pass the class name of the correction")
    if text is not None and not isinstance(text, str):
        raise OcrrError(f"text must be a string or None, got {type(text).__name__}; pass the utterance text or omit it")


def _as_float32(vector: object) -> np.ndarray:
    try:
        return np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise OcrrError(f"vector is not numeric ({e}); pass a numpy array or a list of floats") from e


def _digest_or_raise(i: int, label: str, text: str | None, vec: np.ndarray, prev: bytes) -> bytes:
    try:
        return entry_digest(i, label, text, vec, prev)
    except UnicodeEncodeError as e:
        raise OcrrError(
            f"label or text is not valid Unicode ({e.reason} at position {e.start}); "
            "remove lone surrogates before appending"
        ) from e
