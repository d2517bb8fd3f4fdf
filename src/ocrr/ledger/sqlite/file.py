"""``Ledger``: the hash chain users hold, in memory or backed by a ledger file.

``Ledger(dim)`` is the in-memory chain (``ocrr.ledger.chain.Chain``). ``Ledger.open(path)``
puts a ledger file behind it, in the one format (``ocrr.ledger.sqlite.schema``) that the durable store
(``ocrr.ledger.sqlite.store.DurableLedger``) writes: appends go to memory at once and to the file
on ``flush()``, ``close()`` or leaving a ``with`` block, all of them in one transaction
that returns once it is on disk. A process killed at any moment leaves a file that reopens
with every flushed entry and an intact chain.

``save`` writes a whole ledger to a file of that format, replacing it atomically; ``load``
reads one without writing to it. Files of the old format (before the durable store, tables
``meta`` and ``entries`` only) still load, and ``Ledger.open`` converts them in place after
checking every entry; ``migrate`` converts a copy and leaves the original alone.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import F4LE, INITIAL_CAPACITY, Chain
from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn
from ocrr.ledger.labels import check_new_label
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.rows import check_appended
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.sqlite.scan import KnownPrefix, rows_to_read
from ocrr.ledger.sqlite.schema import add_tree, create_tables
from ocrr.ledger.sqlite.store import DamagedFile, DurableLedger

__all__ = ["Ledger", "migrate"]

_FORMAT, _FORMAT_VERSION = "ocrr-ledger", 1
_LOAD_BATCH = 65_536  # rows read from SQLite at a time
_SIDECARS = ("-journal", "-wal", "-shm")  # SQLite's logs beside a database file


class Ledger(Chain):
    """Append-only, hash-chained store of (vector, label, text) entries.

    ``Ledger(dim)`` is in memory; ``Ledger.open(path)`` also writes each entry to a ledger
    file when flushed; ``save``/``load`` write and read whole files.

    Examples:
        >>> import os, tempfile
        >>> from ocrr.ledger import Ledger
        >>> folder = tempfile.TemporaryDirectory()
        >>> path = os.path.join(folder.name, "ledger.db")
        >>> with Ledger.open(path, dim=3) as ledger:  # the entries are on disk when the block ends
        ...     ledger.append([1.0, 0.0, 0.0], "refund", "I want my money back").id
        ...     ledger.extend([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], ["transfer", "card"])
        0
        range(1, 3)

        Each entry's hash covers the one before it: opening the file checks the whole chain.

        >>> ledger = Ledger.open(path)
        >>> len(ledger), ledger.labels, ledger[0].text
        (3, ('refund', 'transfer', 'card'), 'I want my money back')
        >>> ledger.verify()
        VerifyResult(ok=True, first_bad=None, reason='ok: 3 entries, chain intact')
        >>> ledger[1].prev_hash == ledger[0].hash
        True
        >>> ledger.close()
        >>> folder.cleanup()
    """

    def __init__(self, dim: int | None = None, vectors_on_disk: str | os.PathLike[str] | None = None) -> None:
        super().__init__(dim, vectors_on_disk)
        self._store: DurableLedger | None = None  # the file, when opened with Ledger.open
        self._durable = 0  # entries the file holds; the ones after go in with the next flush
        self._closed = False

    # ------------------------------------------------------------ appending
    def _check_open(self) -> None:
        if self._closed:
            path = None if self._store is None else self._store.path
            raise OcrrError(f"ledger {path} is closed; reopen it with Ledger.open(path) to append")

    # A file's rows and labels follow the durable ledger's rules (finite unit rows,
    # ``ocrr.ledger.rows``; labels, ``ocrr.ledger.labels``): checked at the append, so a bad
    # one is refused alone, not at the next flush with every entry appended after it.
    def append_checked(self, vec: np.ndarray, label: str, text: str | None) -> int:
        self._check_open()  # (a closed ledger says so first)
        if self._store is not None:
            check_appended(vec[None, :])
            check_new_label(0, label)
        return super().append_checked(vec, label, text)

    def _extend(self, mat: np.ndarray, labels: Sequence[str], texts: Sequence[str | None], hashes) -> range:
        if self._store is not None and hashes is None:  # (given hashes: the store's own, checked commit)
            check_appended(mat)
            for i, label in enumerate(labels):
                check_new_label(i, label)
        return super()._extend(mat, labels, texts, hashes)

    # ------------------------------------------------------------ the file
    @classmethod
    def open(
        cls, path: str | os.PathLike[str], dim: int | None = None, vectors_on_disk: str | os.PathLike[str] | None = None
    ) -> Ledger:
        """Open (or create) a file-backed ledger; an existing file is checked entry by entry first.

        Appends become durable on ``flush()`` or ``close()`` (or leaving a ``with`` block).
        A file of the old format is converted in place (after the same check). One writer
        at a time: to share a file between processes, use ``DurableLedger`` or ``ocrr.open_substrate``.
        """
        ledger = cls(dim, vectors_on_disk=vectors_on_disk)
        known = ledger._rows_on_disk(Path(path).expanduser()) if ledger.on_disk else None
        # The store feeds the file's entries to the ledger now, and each commit's afterwards.
        ledger._store = DurableLedger.open(path, dim=dim, apply=ledger._take_committed, known=known)
        return ledger

    def _rows_on_disk(self, path: Path) -> KnownPrefix | None:
        """Where the open's check reads the file's rows: this ledger's vector file, made big
        enough for them, so that they are never all in memory, not even while the file is
        checked. None when the file does not say how many (the open then finds why)."""
        held = rows_to_read(path)
        if held is None or not held[1] or (self.dim is not None and held[0] != self.dim):
            return None
        dim, rows = held
        return KnownPrefix(0, self._reserve(dim, rows), LabelColumn(), TextColumn(), HashColumn(), MerkleTree())

    def _take_committed(
        self, vectors: np.ndarray, labels: Sequence, texts: Sequence, hashes: Sequence | None = None
    ) -> bytes:
        """The store committed these entries (or found them in the file): return the chain
        head after them, which the store checks against the file's. (``hashes``: the store's
        of them; this ledger hashed its own entries already, and hashes the file's itself.)"""
        start, m = self._durable, len(labels)
        if start == self._n:  # the file's entries when opening: not in memory yet
            super().extend(vectors, labels, texts)
        elif not self._holds(start, vectors, labels, texts):
            assert self._store is not None  # entries held already: open() has set the store
            raise OcrrError(
                f"another process appended to ledger {self._store.path} while this Ledger held "
                f"{self._n - start} unflushed entries, so they no longer follow the file's last entry; "
                "nothing of them was written. Reopen the file with Ledger.open(path) and append them again "
                "(a Ledger.open ledger must be its file's only writer; share a file with DurableLedger)"
            )
        self._durable = start + m
        return self._hashes[start + m - 1]

    def _holds(self, start: int, vectors: np.ndarray, labels: Sequence, texts: Sequence) -> bool:
        """Whether entries ``start..`` in memory are these (this ledger's own, being flushed)."""
        end = start + len(labels)
        return (
            end <= self._n
            and self._labels[start:end] == list(labels)
            and self._texts[start:end] == list(texts)
            and self.vectors[start:end].tobytes() == np.ascontiguousarray(vectors, F4LE).tobytes()
        )

    def flush(self) -> None:
        """Write the entries appended since the last flush to the file in one transaction;
        return once they are on disk. Nothing to do for an in-memory ledger."""
        if self._store is None or self._durable == self._n:
            return
        start, end = self._durable, self._n
        self._store.extend(self._buffer()[start:end], self._labels[start:end], self._texts[start:end])

    def close(self) -> None:
        """Flush and detach from the file; later appends raise."""
        if self._store is None:
            return
        try:
            self.flush()
        finally:
            self._store.close()
            self._closed = True

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # A file-backed ledger holds an open file: pickle a loaded copy or the path instead.
    def __getstate__(self) -> dict:
        if self._store is not None and not self._closed:
            raise OcrrError(
                f"cannot pickle a ledger open on {self._store.path}; close() it and pickle "
                "Ledger.load(path), or pickle the path"
            )
        state = super().__getstate__()
        state.update(_store=None, _closed=False)  # the copy is an in-memory ledger
        return state

    def __setstate__(self, state: dict) -> None:
        for old in ("_db", "_db_path"):  # pickled before the durable store
            state.pop(old, None)
        state.setdefault("_store", None)
        state.setdefault("_durable", 0)
        state.setdefault("_closed", False)
        super().__setstate__(state)

    # ------------------------------------------------------------ whole files
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write every entry to a ledger file, replacing it atomically."""
        path = Path(path)
        if not path.parent.is_dir():
            raise OcrrError(f"cannot save ledger to {path}: directory {path.parent} does not exist; create it first")
        if self._store is not None and not self._closed and path.resolve() == self._store.path.resolve():
            raise OcrrError(f"{path} is this ledger's own file; call flush() to write its new entries there")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)  # rollback journal: a finished file has no sidecar
            try:
                conn.execute("BEGIN")
                create_tables(conn, self._dim)
                conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", self._rows())
                add_tree(conn, self._rows())
                conn.execute("COMMIT")
            finally:
                conn.close()
            for sidecar in _SIDECARS:  # a log left by a writer of the replaced file must not touch this one
                Path(f"{path}{sidecar}").unlink(missing_ok=True)
            os.replace(tmp, path)  # readers see the old file or the new one, never half of one
        except BaseException:
            for suffix in ("", *_SIDECARS):
                Path(f"{tmp}{suffix}").unlink(missing_ok=True)
            raise

    def _rows(self) -> Iterator[tuple]:
        """Stored columns per entry, as written to the file."""
        vecs = self.vectors
        for i in range(self._n):
            vec = vecs[i].tobytes()
            yield (self._id(i), self._labels[i], self._texts[i], vec, self._prev_of(i), self._hashes[i])

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], verify: bool = True, vectors_on_disk: str | os.PathLike[str] | None = None
    ) -> Ledger:
        """Read a ledger file as stored (nothing recomputed, nothing written), then verify
        its chain and, when it has one, the size and head its last commit recorded.

        Rows are streamed, so memory holds one batch of rows at a time plus the ledger
        itself; ``vectors_on_disk`` puts the vectors in a memory-mapped scratch file.
        ``ocrr ledger verify`` also checks the file's Merkle tree and checkpoints.
        """
        path = Path(path)
        ledger, meta = cls._read_file(path, vectors_on_disk)
        if verify:
            result = ledger.verify()
            ok, reason = result.ok, result.reason
            if ok and "size" in meta and (meta["size"] != len(ledger) or meta.get("chain_head") != ledger.head):
                reason = (
                    f"it holds {len(ledger)} entries but its last commit recorded {meta['size']} "
                    "(entries removed or added outside the ledger)"
                )
                ok = False
            if not ok:
                raise OcrrError(
                    f"ledger {path} failed verification: {reason}; the ledger file was modified after "
                    "it was written; restore it from a backup or load with verify=False to inspect it"
                )
        return ledger

    @classmethod
    def _read_file(cls, path: Path, vectors_on_disk: str | os.PathLike[str] | None) -> tuple[Ledger, dict]:
        """The entries table as stored, and the meta table (either format)."""
        if not path.is_file():
            raise OcrrError(f"ledger file {path} does not exist; check the path or create it with Ledger.open(path)")
        try:
            conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise OcrrError(f"cannot read ledger file {path} ({e}); check its permissions") from e
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            if meta.get("format") != _FORMAT or str(meta.get("version")) != str(_FORMAT_VERSION):
                raise OcrrError(
                    f"{path} is not an ocrr ledger v{_FORMAT_VERSION} file (meta says format={meta.get('format')!r}, "
                    f"version={meta.get('version')!r}); pass a file written by Ledger.save of this ocrr version"
                )
            count = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
            dim = meta.get("dim")
            if count and (type(dim) is not int or dim < 1):
                raise OcrrError(
                    f"{path} has entries but no valid dim in its meta table ({dim!r}); restore it from a backup"
                )
            ledger = cls(dim if type(dim) is int and dim >= 1 else None, vectors_on_disk=vectors_on_disk)
            if count:
                assert dim is not None  # checked above: a file with entries has a valid dim
                ledger._set_buffer(ledger._allocate(max(INITIAL_CAPACITY, count), dim))
            columns: tuple[list, list, list, list, list] = ([], [], [], [], [])  # compacted once read
            cursor = conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY rowid")
            i = 0
            while rows := cursor.fetchmany(_LOAD_BATCH):  # streamed: a 10M-entry file never sits in memory twice
                # Rows, so count > 0 (barring a writer between the two reads): dim valid, buffer allocated.
                buf = ledger._buffer()
                assert dim is not None
                for row in rows:
                    blob = row[3]
                    if not isinstance(blob, bytes) or len(blob) != 4 * dim:
                        size = len(blob) if isinstance(blob, (bytes, str)) else type(blob).__name__
                        raise OcrrError(
                            f"{path}: entry {i} stores a vector of {size} bytes, expected {4 * dim} for dim {dim}; "
                            "the ledger file is corrupt or was modified; restore it from a backup"
                        )
                    buf[i] = np.frombuffer(blob, F4LE)
                    i += 1
                ids, labels, texts, _, prevs, hashes = zip(*rows)
                columns[0].extend(ids)
                columns[1].extend(labels)
                columns[2].extend(texts)
                columns[3].extend(prevs)
                columns[4].extend(hashes)
        except sqlite3.Error as e:
            if Path(f"{path}-journal").exists():  # a writer of the old format was killed mid-write
                raise OcrrError(
                    f"{path} has an unfinished write ({path}-journal, left by a process that stopped while "
                    f"writing it); open it once with Ledger.open(path), which undoes that write and checks the file"
                ) from e
            raise OcrrError(
                f"{path} is not a readable ocrr ledger ({e}); pass a file written by Ledger.save or Ledger.open"
            ) from e
        finally:
            conn.close()
        ledger._take_columns(*columns)
        ledger._n = ledger._durable = i
        return ledger, meta


def migrate(old: str | os.PathLike[str], new: str | os.PathLike[str]) -> LedgerReport:
    """Write a copy of ledger file ``old`` (of the old format or this one) to ``new`` in this
    format, checked entry by entry; ``old`` is not changed. Returns the check's report. A
    source that is no ledger, or a damaged one, is refused by its own name, and leaves no
    ``new``: the copy is removed."""
    old, new = Path(old), Path(new)
    if not old.is_file():
        raise OcrrError(f"ledger file {old} does not exist; check the path")
    if new.exists():
        raise OcrrError(f"{new} already exists; migrate into a new file")
    _check_sqlite(old)  # before anything is created
    try:
        try:
            shutil.copyfile(old, new)
            for log in ("-journal", "-wal"):  # an unfinished write is undone, a committed one kept, in the copy
                if Path(f"{old}{log}").exists():
                    shutil.copyfile(f"{old}{log}", f"{new}{log}")
        except OSError as e:
            raise OcrrError(f"cannot copy {old} to {new} ({e}); check the paths and free disk space") from e
        _check_tables(new, old)
        try:
            with DurableLedger.open(new) as store:  # converts the copy, checks every entry, records a checkpoint
                return store.report
        except DamagedFile as e:  # the copy's damage is the source's: name the source
            where = "" if e.report.first_bad is None else f" at entry {e.report.first_bad}"
            raise OcrrError(
                f"ledger {old} is damaged{where}: {e.report.reason}; nothing was migrated: restore {old} "
                "from a backup and migrate that"
            ) from None
    except BaseException:
        for suffix in ("", *_SIDECARS, "-writer"):
            Path(f"{new}{suffix}").unlink(missing_ok=True)
        raise


_SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite file


def _check_sqlite(old: Path) -> None:
    """Refuse a source that is not an SQLite file (SQLite would take an empty one for a new
    database, and the migration would make an empty ledger of it)."""
    try:
        with open(old, "rb") as f:
            start = f.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise OcrrError(f"cannot read {old} ({e}); check the path and its permissions") from e
    if not start:
        raise OcrrError(f"{old} is empty, not a ledger file; pass the ledger file to migrate")
    if start != _SQLITE_HEADER:
        raise OcrrError(
            f"{old} is not an ocrr ledger: it is not an SQLite file; pass the ledger file to migrate (if this "
            "was one, its first bytes are destroyed: restore it from a backup)"
        )


def _check_tables(copy: Path, old: Path) -> None:
    """Refuse, by its source's name, a copy without a ledger's tables (opened, a database with
    no tables would become a new, empty ledger) or whose schema cannot be read."""
    try:
        conn = sqlite3.connect(copy)
        try:  # the whole schema read as text: a damaged byte in it is found here, not by the open
            schema = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        # (the latter: SQLite's message quoting a damaged schema's bytes, which Python cannot decode)
        why = "its schema is not UTF-8 text" if isinstance(e, UnicodeDecodeError) else str(e)
        raise OcrrError(f"{old} is not a readable SQLite file ({why}); restore it from a backup") from None
    tables = {name for kind, name, _ in schema if kind == "table"}
    if "meta" not in tables:
        raise OcrrError(f"{old} is an SQLite file but not an ocrr ledger (no meta table); pass the ledger file")
