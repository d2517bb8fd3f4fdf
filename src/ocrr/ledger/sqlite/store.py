"""The durable ledger: appends acknowledged only once on disk, shared commits, checked reopening.

SQLite runs in WAL mode with ``synchronous=FULL``, so a commit is on disk when it
returns. ``append`` returns only after its entry is committed; appends that arrive while
a commit is running wait and then go in one transaction together (group commit: one
fsync for all of them; the queue is ``ocrr.ledger.group_commit``). On open, the whole
file is checked (``verify="full"``) or only what follows the last recorded checkpoint
(``verify="checkpoint"``); a broken file is refused with the first bad entry (the file
format and the check: ``ocrr.ledger.scan``).
Vectors and the hash chain are mirrored in memory (``memory``, an in-memory ``Chain``,
or whatever ``apply`` feeds, e.g. a substrate); that mirror is a cache of the file,
rebuilt on every open.

Several processes may append to one file (the workers of ``ocrr serve --workers N``):
SQLite lets one of them write at a time, and each commit first takes in, checked, the
entries the others committed since (they chain on from what this process holds), so ids
and the chain stay one sequence, then checks that the file ends where this process does
(``ocrr.ledger.tail``: rows removed or inserted behind its back fail it closed). All of them
must reach the file through one name (``ocrr.ledger.file_locks``). ``refresh`` takes them in without writing, which a
reader does before it answers, so it answers for every acknowledged correction.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger.chain import GENESIS, Chain
from ocrr.ledger.checkpoint_records import record_note
from ocrr.ledger.file_locks import FileHold, join_writers
from ocrr.ledger.group_commit import GroupCommit, Pending
from ocrr.ledger.heads import Signer
from ocrr.ledger.scan import (
    VERIFICATIONS_TABLE,
    LedgerReport,
    _adopt_v1,
    _connect,
    _Damage,
    _report_of,
    _Scan,
    _schema,
    add_note_column,
    check_entry,
    scan_file,
)
from ocrr.ledger.tail import StoredTail, check_tail
from ocrr.ledger.verify import entry_bytes
from ocrr.utils.rwlock import RWLock

__all__ = ["DurableLedger", "LedgerReport", "scan_file"]

_F4LE = np.dtype("<f4")
_BATCH = 65_536
_VERIFICATIONS_KEPT = 100  # outcomes of /verify kept in the file
# The stored tail (ocrr.ledger.tail.StoredTail) in one statement: point reads on two primary keys.
_TAIL = (
    "SELECT (SELECT value FROM meta WHERE key = 'size'), (SELECT value FROM meta WHERE key = 'chain_head'), "
    "(SELECT hash FROM entries WHERE id = ?), (SELECT max(id) FROM entries)"
)

# apply(vectors (m, d) float32, labels, texts) -> the in-memory chain head afterwards:
# feeds committed entries to the in-memory side, which must hash them to the same chain.
Apply = Callable[[np.ndarray, list, list], bytes]


class DurableLedger(GroupCommit):
    """A ledger file that acknowledges appends only once they are on disk.

    ``DurableLedger.open(path)`` creates or opens the file, checks it and mirrors it in
    memory: ``memory`` is a plain ``Chain`` unless ``apply`` is given, in which case
    ``apply`` receives the stored entries on open and every committed batch afterwards
    (the persistent substrate feeds its ledger and index this way). ``lock`` (an RWLock)
    is held for writing while the mirror changes; read the mirror under ``lock.read()``.
    Thread-safe.
    """

    path: Path
    _file: FileHold | None = None  # the file held as one of its writers (``open``)

    def __init__(self, path: Path, conn: sqlite3.Connection, scan: _Scan, report: LedgerReport, apply: Apply | None):
        self.path, self._conn = path, conn
        self._start_mirror(scan, report)
        try:
            self._watch = _connect(path)  # reads the file's size for refresh, beside the writing connection
            # Writers of other processes queue on this lock file, not in SQLite's busy handler, which
            # polls with sleeps of up to 100 ms (measured: corrections' p99 87 ms with two writers).
            self._writer = os.open(f"{path}-writer", os.O_RDWR | os.O_CREAT, 0o644)
        except (OSError, sqlite3.Error) as e:
            conn.close()
            if hasattr(self, "_watch"):
                self._watch.close()
            raise _not_writable(path, e) from e
        self._version: int | None = None  # PRAGMA data_version at the last refresh
        try:
            self._take_in_scan(scan, apply)
        except BaseException:
            conn.close()
            self._watch.close()
            os.close(self._writer)
            raise

    def _start_mirror(self, scan: _Scan, report: LedgerReport) -> None:
        """The state every store keeps beside its storage: the checked entries' tree and chain,
        the lock over the mirror, the group-commit queue. Shared by every store."""
        self.dim: int | None = scan.dim
        self.tree = scan.tree
        self._hashes: list[bytes] = scan.hashes
        self.report = report
        self.lock = RWLock()  # write: the mirror changes; read: a consistent view of it
        self._start_group_commits()
        self.followed = 0  # entries other processes committed, taken in by this one
        # Taking in other processes' entries and feeding our own commits to the mirror happen
        # in id order under _follow; _own: the ids our commit in flight will add (fed by it).
        self._follow = threading.Condition()
        self._own: tuple[int, int] | None = None
        self.memory: Chain | None = None
        self._apply: Apply
        # Signs the checkpoint records of full checks; its verifier key is the one whose
        # records this store trusts (set by open; None: records none, trusts none).
        self.signer: Signer | None = None

    def _take_in_scan(self, scan: _Scan, apply: Apply | None) -> None:
        """Hand the checked entries to the caller's ``apply``, or (None) keep a plain Chain
        mirror built from the checked columns without rehashing. Shared by every store."""
        if apply is None:
            n = len(scan.hashes)
            self.memory = Chain._from_stored(
                self.dim,
                list(range(n)),
                scan.labels,
                scan.texts,
                scan.vectors,
                [GENESIS, *scan.hashes[:-1]][:n],
                scan.hashes,
            )
            self._apply = self._apply_memory
        else:
            self._apply = apply
            if scan.hashes:
                self._feed(scan.vectors, scan.labels, scan.texts)

    # -- opening ------------------------------------------------------------------------
    @property
    def vkeys(self) -> tuple[str, ...]:
        """The verifier keys whose checkpoint records this store trusts: its signer's, or none."""
        return () if self.signer is None else (self.signer.vkey,)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        dim: int | None = None,
        verify: str = "full",
        apply: Apply | None = None,
        signer: Signer | None = None,
    ) -> DurableLedger:
        """Open (creating if missing) and check a ledger file; refuse a broken one.

        ``signer``: the key that signs the checkpoint records of full checks, and whose
        records ``verify="checkpoint"`` trusts to skip rehashing the entries before them.
        Without one, nothing is recorded and every entry is rehashed on every open."""
        path = Path(path).expanduser()
        if verify not in ("full", "checkpoint"):
            raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise OcrrError(f"dim must be a positive integer, got {dim!r}")
        if not path.exists() and not path.parent.is_dir():
            raise OcrrError(f"cannot create ledger {path}: directory {path.parent} does not exist; create it first")
        path = path.resolve()  # symlinks followed: SQLite keeps its log beside the file's own name, so does ocrr
        writer = join_writers(path)  # before SQLite opens it: one name per file (ocrr.ledger.file_locks)
        try:
            return cls._open_held(path, writer, dim, verify, apply, signer)
        except BaseException:
            writer.release()
            raise

    @classmethod
    def _open_held(
        cls, path: Path, writer: FileHold, dim: int | None, verify: str, apply: Apply | None, signer: Signer | None
    ) -> DurableLedger:
        """``open``, once the file is held as one of its writers (``writer``, let go on close)."""
        conn: sqlite3.Connection | None = None
        try:
            conn = _connect(path)
            with _writers_turn(path):  # queue with the writers (see _writers_turn)
                try:
                    conn.execute("BEGIN IMMEDIATE")  # no other writer while we check the file
                    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    if not tables:
                        _schema(conn, dim)
                    elif "meta" not in tables:
                        raise OcrrError(
                            f"{path} is an SQLite file but not an ocrr ledger (no meta table); pass another path"
                        )
                    elif "nodes" not in tables:  # written by Ledger.save / Ledger.open: add the tree
                        _adopt_v1(conn)
                    elif "checkpoints" in tables:  # (a file without it: the scan says so)
                        add_note_column(conn)  # a file from before signed checkpoint records
                    vkeys = () if signer is None else (signer.vkey,)
                    report, scan = _report_of(conn, None if verify == "full" else 0, vkeys)
                    conn.execute("COMMIT" if report else "ROLLBACK")  # a damaged v1 file stays as it was
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")  # before the writers' lock goes: they may begin at once
                    raise
        except sqlite3.Error as e:
            if conn is not None:
                conn.close()
            raise OcrrError(
                f"cannot open ledger {path} ({e}); check that it is an ocrr ledger file and that its folder is writable"
            ) from e
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if not report:
            conn.close()
            where = "" if report.first_bad is None else f" at entry {report.first_bad}"
            raise OcrrError(
                f"ledger {path} is damaged{where}: {report.reason}. Refusing to serve it; restore "
                f"the file from a backup (run `ocrr ledger verify {path}` for the report)"
            )
        assert scan is not None  # an intact report comes with what the scan read
        if dim is not None and scan.dim is not None and dim != scan.dim:
            conn.close()
            raise OcrrError(f"ledger {path} holds vectors of dimension {scan.dim}, not {dim}; use another file")
        scan.dim = scan.dim or dim
        ledger = cls(path, conn, scan, report, apply)
        ledger.signer = signer
        ledger._file = writer
        if verify == "full":
            try:
                ledger._record_checkpoint()  # (written in line with the writers: _write_aside)
            except BaseException:
                ledger.close()
                raise
        return ledger

    # -- reading ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._hashes)

    @property
    def chain_head(self) -> bytes:
        hashes = self._hashes
        return hashes[-1] if hashes else GENESIS

    def entry_hash(self, i: int) -> bytes:
        return self._hashes[i]

    def root(self, size: int | None = None) -> bytes:
        """Merkle root of the first ``size`` entries (default: every committed one)."""
        return self.tree.root(len(self) if size is None else self._size(size))

    def head(self) -> tuple[int, bytes, bytes]:
        """(size, root, chain head) of the committed log, read together."""
        size, root, chain, _ = self.head_with_proofs(())
        return size, root, chain

    def head_with_proofs(self, ids) -> tuple[int, bytes, bytes, list[tuple[int, bytes, list[bytes]]]]:
        """The committed head and, for each id, (id, leaf hash, inclusion proof) at that head."""
        with self.lock.read():
            size = len(self._hashes)
            proofs = [(i, self.tree.node(0, i), self.tree.inclusion_proof(i, size)) for i in ids]
            return size, self.tree.root(size), self._hashes[size - 1] if size else GENESIS, proofs

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return self.tree.inclusion_proof(index, len(self) if size is None else self._size(size))

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        return self.tree.consistency_proof(size1, len(self) if size2 is None else self._size(size2))

    def _size(self, size: int) -> int:
        # The tree may already hold the leaves of a commit in flight: never prove past the committed end.
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= len(self):
            raise IndexError(f"size {size!r} is outside 0..{len(self)} (the committed log)")
        return size

    def read_entries(self, lo: int = 0, hi: int | None = None):
        """Yield (id, label, text, vector bytes, prev_hash, hash) from the file, in id order."""
        hi = len(self) if hi is None else hi
        conn = _connect(self.path, readonly=True)
        conn.text_factory = _text_as_stored  # text that is not UTF-8 is returned, not raised: readers reject it
        try:
            cur = conn.execute(
                "SELECT id, label, text, vector, prev_hash, hash FROM entries WHERE id >= ? AND id < ? ORDER BY id",
                (lo, hi),
            )
            while batch := cur.fetchmany(_BATCH // 16):
                yield from batch
        finally:
            conn.close()

    def record_verification(self, report: dict) -> None:
        """Keep a verification's outcome (a JSON object with its ``time``) in the file, so that
        every process serving it, and the next start, shows the latest one, whoever ran it
        (the latest ``_VERIFICATIONS_KEPT`` are kept). A report with ``ok`` false is also how
        damage found by one process reaches the others (``damage_since``)."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(VERIFICATIONS_TABLE)  # files from before the table
            cur = conn.execute(
                "INSERT INTO verifications (time, report) VALUES (?, ?)", (float(report["time"]), json.dumps(report))
            )
            # The latest few only: the file must not grow with every call.
            rowid = cur.lastrowid
            assert rowid is not None  # set by the INSERT just run
            conn.execute("DELETE FROM verifications WHERE id <= ?", (rowid - _VERIFICATIONS_KEPT,))

        self._write_aside(write)

    def _write_aside(self, write: Callable[[sqlite3.Connection], object]) -> None:
        """Run ``write`` in a transaction on the watching connection, between group commits:
        a write of this process's own (a checkpoint, a verification) then leaves that
        connection's ``PRAGMA data_version`` as it was, so ``data_version`` changes only when
        another connection (a commit, another process, an edit of the file) changed the file."""
        with self._cv:  # between group commits (one of ours in flight holds SQLite's lock and wants _follow)
            while self._committing:
                self._cv.wait()
            if self._closed:
                return
            with _writer_lock(self._writer), self._follow:  # in line with the writers, as _commit is
                self._watch.execute("BEGIN IMMEDIATE")
                try:
                    write(self._watch)
                    self._watch.execute("COMMIT")
                except BaseException:
                    self._watch.execute("ROLLBACK")
                    raise

    def data_version(self) -> int | None:
        """SQLite's ``PRAGMA data_version`` of the file as this process sees it: it changes
        whenever anything but this ledger's own checkpoints and verification records is
        committed to the file (corrections included). None once closed."""
        with self._follow:
            return None if self._closed else self._watch.execute("PRAGMA data_version").fetchone()[0]

    def damage_since(self, after: int, wait: bool = True) -> tuple[int, dict | None] | None:
        """The latest verification record's id past ``after`` (or ``after``), and the first of
        them that found damage (``ok`` false), or None: the check every process serving the
        file makes to honour damage another found. ``wait=False``: None at once, if another
        thread is reading the file through this connection now."""
        if not self._follow.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                return None
            try:
                rows = self._watch.execute(
                    "SELECT id, report FROM verifications WHERE id > ? ORDER BY id", (after,)
                ).fetchall()
            except sqlite3.OperationalError:  # a file from before the table: none recorded yet
                return after, None
        finally:
            self._follow.release()
        bad = None
        for _, text in rows:
            try:
                report = json.loads(text)
            except ValueError:
                report = {"ok": False, "reason": "a verification record in the file is unreadable"}
            if not isinstance(report, dict) or report.get("ok") is not True:
                bad = report if isinstance(report, dict) else {"ok": False, "reason": "a bad verification record"}
                break
        return (rows[-1][0] if rows else after), bad

    def check_slice(self, lo: int, hi: int) -> tuple[int, str] | None:
        """Rehash entries ``lo``..``hi - 1`` as they are in the file now and compare them with
        the chain this process holds; the first that differs (its id and why), or None. The
        background check's rolling pass over entries older than the last checkpoint."""
        hi = min(hi, len(self))
        if lo >= hi or self.dim is None:
            return None
        conn = _connect(self.path, readonly=True)
        try:
            rows = conn.execute(
                "SELECT id, label, text, vector, prev_hash, hash FROM entries WHERE id >= ? AND id < ? ORDER BY id",
                (lo, hi),
            ).fetchall()
        except sqlite3.Error as e:
            return lo, f"entries {lo}..{hi - 1} could not be read ({e})"
        finally:
            conn.close()
        prev = self._hashes[lo - 1] if lo else GENESIS
        for i, row in enumerate(rows, lo):
            id_, label, text, raw, prev_hash, digest = row
            try:
                if id_ != i:
                    raise _Damage(i, f"entry {i}: id is {id_!r} (an entry was removed)")
                check_entry(i, label, text, raw, prev_hash, digest, prev, self.dim)
                if digest != self._hashes[i]:
                    raise _Damage(i, f"entry {i}: its hash differs from the one committed (history rewritten)")
            except _Damage as e:
                return i, e.reason
            prev = digest
        if len(rows) != hi - lo:
            return lo + len(rows), f"entry {lo + len(rows)} is missing (entries were removed)"
        return None

    def last_verification(self) -> dict | None:
        """The latest outcome ``record_verification`` kept (by any process), or None."""
        conn = _connect(self.path, readonly=True)
        try:
            row = conn.execute("SELECT report FROM verifications ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # a file from before the table, none recorded yet
            row = None
        finally:
            conn.close()
        return json.loads(row[0]) if row else None

    # -- appending ----------------------------------------------------------------------

    def _commit(self, batch: list[Pending]) -> None:
        conn, n0 = self._conn, None
        try:
            with _writer_lock(self._writer):  # wait here, woken as soon as the other writer is done
                try:
                    conn.execute("BEGIN IMMEDIATE")  # the file's one writer until COMMIT, across processes
                    with self._follow:
                        # Entries other processes committed come first; none can come now (we hold the lock).
                        self._take_in(conn)
                        self._check_tail(StoredTail(*conn.execute(_TAIL, (len(self._hashes) - 1,)).fetchone()))
                        ok, dim = self._same_dim(batch)
                        if not ok:
                            conn.execute("ROLLBACK")
                            return
                        rows, nodes, digests, n0 = self._rows_of(ok)
                        self._own = (n0, n0 + len(rows))
                    conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
                    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
                    conn.executemany(
                        "UPDATE meta SET value = ? WHERE key = ?",
                        [(n0 + len(rows), "size"), (digests[-1], "chain_head"), (dim, "dim")],
                    )
                    conn.execute("COMMIT")  # returns once the WAL is fsynced (synchronous=FULL)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except BaseException as e:
            with self._follow:
                if n0 is not None:
                    self.tree.truncate(n0)
                self._own = None
                self._follow.notify_all()
            err = self._write_error(e)
            for p in batch:
                if not p.done:
                    p.error, p.done = err, True
            return
        self.commits += 1
        self.dim = dim
        with self._follow, self.lock.write():  # the mirror follows the file
            self._own = None
            self._follow.notify_all()
            self._hashes.extend(digests)
            vecs = np.concatenate([p.vecs for p in ok]) if len(ok) > 1 else ok[0].vecs
            labels = [x for p in ok for x in p.labels]
            texts = [x for p in ok for x in p.texts]
            try:
                self._feed(vecs, labels, texts)
            except BaseException as e:  # on disk but not in memory: refuse appends until reopened
                self._broken = OcrrError(
                    f"ledger {self.path}: the in-memory copy could not take committed entries ({e}); reopen the ledger"
                )
                raise self._broken from e
        for p in ok:
            p.done = True

    def _check_tail(self, tail: StoredTail) -> None:
        """In the write transaction: storage ends where this ledger does (``ocrr.ledger.tail``),
        or the ledger fails closed: this append and every later one are refused."""
        try:
            check_tail(self.path, len(self._hashes), self.chain_head, tail)
        except LedgerIntegrityError as e:
            self._broken = e
            raise

    def _write_error(self, e: BaseException) -> OcrrError:
        """What a failed group commit tells its appenders: an integrity failure fails the ledger
        closed; any other failure to write is storage's (never the appender's fault)."""
        if isinstance(e, OcrrError):
            return e
        if isinstance(e, sqlite3.IntegrityError):  # a row where the ledger's next ones go
            self._broken = LedgerIntegrityError(
                f"ledger {self.path}: storage already holds rows where the next entries go ({e}); nothing "
                f"was appended. Stop the processes writing it and run `ocrr ledger verify {self.path}`",
                len(self._hashes),
            )
            return self._broken
        return LedgerStorageError(
            f"could not write to ledger {self.path} ({e}); nothing was appended; check disk space and permissions"
        )

    def _same_dim(self, batch: list[Pending]) -> tuple[list[Pending], int]:
        """The items of the ledger's dimension (the first commit fixes it), and that dimension;
        the others fail."""
        dim = self.dim or batch[0].vecs.shape[1]
        ok = [p for p in batch if p.vecs.shape[1] == dim]
        for p in batch:
            if p.vecs.shape[1] != dim:
                p.error, p.done = (
                    OcrrError(
                        f"vectors have dimension {p.vecs.shape[1]}, the ledger holds {dim}; "
                        "encode with the ledger's encoder"
                    ),
                    True,
                )
        return ok, dim

    def _rows_of(self, ok: list[Pending]):
        """The rows, tree nodes and digests of new entries chained on from the last one."""
        rows, nodes, digests = [], [], []
        n0 = n = len(self._hashes)
        prev = self.chain_head
        for p in ok:
            p.ids = range(n, n + len(p.labels))
            for vec, label, text in zip(p.vecs, p.labels, p.texts):
                raw = vec.astype(_F4LE, copy=False).tobytes()
                pre = entry_bytes(n, label, text, raw, prev)
                digest = hashlib.sha256(pre).digest()
                rows.append((n, label, text, raw, prev, digest))
                nodes.extend(self.tree.append(hashlib.sha256(b"\x00" + pre).digest()))
                digests.append(digest)
                prev, n = digest, n + 1
        return rows, nodes, digests, n0

    # -- other processes' entries -----------------------------------------------------
    def refresh(self) -> int:
        """Take in the entries other processes committed to the file since this one last
        looked (checked: each must chain on from ours); return how many. Cheap when nothing
        changed (one ``PRAGMA data_version``); never waits for a commit's fsync."""
        with self._follow:
            while True:
                if self._closed:
                    return 0
                version = self._watch.execute("PRAGMA data_version").fetchone()[0]
                if version == self._version:
                    return 0
                size = self._watch.execute("SELECT value FROM meta WHERE key = 'size'").fetchone()[0]
                if self._own is None or size <= self._own[1]:
                    break
                self._follow.wait()  # our commit's rows, then others': wait until ours are fed
            if self._own is not None or size <= len(self._hashes):
                self._version = version  # nothing new, or only our own commit's rows (fed by it)
                return 0
            self._watch.execute("BEGIN")  # one snapshot of the file
            try:
                got = self._take_in(self._watch)
            finally:
                self._watch.execute("COMMIT")
            self._version = version
            return got

    def _take_in(self, conn: sqlite3.Connection) -> int:
        """Under ``_follow``, in a transaction on ``conn``: add the file's entries past ours to
        the tree, the chain and the mirror, each checked to chain on from the one before."""
        size = conn.execute("SELECT value FROM meta WHERE key = 'size'").fetchone()[0]
        n0 = len(self._hashes)
        if size <= n0:
            return 0
        if self._broken is not None:
            raise self._broken
        try:
            self.dim = self.dim or conn.execute("SELECT value FROM meta WHERE key = 'dim'").fetchone()[0]
            rows = conn.execute(
                "SELECT id, label, text, vector, prev_hash, hash FROM entries WHERE id >= ? AND id < ? ORDER BY id",
                (n0, size),
            ).fetchall()
            prev, leaves, digests = self.chain_head, [], []
            for i, (id_, label, text, raw, prev_hash, digest) in enumerate(rows, n0):
                try:
                    if id_ != i:
                        raise _Damage(i, f"entry {i}: id is {id_!r}")
                    leaf = check_entry(i, label, text, raw, prev_hash, digest, prev, self.dim)
                    assert leaf is not None  # rehashed (the default), so it has its leaf
                    leaves.append(leaf)
                except _Damage as e:
                    raise LedgerIntegrityError(
                        f"entry {i}, written by another process, does not chain on from entry {i - 1} ({e.reason})", i
                    ) from None
                digests.append(digest)
                prev = digest
            if len(rows) != size - n0:
                raise LedgerIntegrityError(
                    f"the file says it holds {size} entries but has {n0 + len(rows)}", n0 + len(rows)
                )
            vecs = np.frombuffer(b"".join(r[3] for r in rows), _F4LE).reshape(len(rows), self.dim)
            with self.lock.write():
                for leaf in leaves:
                    self.tree.append(leaf)
                self._hashes.extend(digests)
                self._feed(vecs.astype(np.float32), [r[1] for r in rows], [r[2] for r in rows])
        except BaseException as e:  # the mirror may be part-way: refuse to go on until reopened
            message = (
                f"ledger {self.path}: could not take in entries other processes committed "
                f"({e}); stop the processes writing it and run `ocrr ledger verify {self.path}`"
            )
            self._broken = (
                LedgerIntegrityError(message, e.first_bad)
                if isinstance(e, LedgerIntegrityError)
                else LedgerStorageError(message)
            )
            raise self._broken from e
        self.followed += len(rows)
        return len(rows)

    def _feed(self, vecs: np.ndarray, labels: list, texts: list) -> None:
        if self._apply(vecs, labels, texts) != self.chain_head:  # same bytes in, same digests out
            raise OcrrError(
                f"ledger {self.path}: the in-memory chain does not match the file (was the "
                "substrate opened with other settings than the ones that wrote it?)"
            )

    def _apply_memory(self, vecs: np.ndarray, labels: list, texts: list) -> bytes:
        memory = self.memory
        assert memory is not None  # made in __init__ whenever this method is the apply
        if memory.dim is None:
            memory = self.memory = Chain(vecs.shape[1])
        if len(labels) == 1:
            memory.append_checked(vecs[0], labels[0], texts[0])
        else:
            memory.extend(vecs, labels, texts)
        return memory.head

    # -- checking -----------------------------------------------------------------------
    def verify(self, verify: str = "full") -> LedgerReport:
        """Re-read and check the file as it is on disk now; record a checkpoint if intact."""
        report, _ = scan_file(self.path, verify, self.vkeys)
        self.report = report
        if report and verify == "full":
            self.refresh()  # other processes may have appended: vouch only for entries this one holds too
            self._record_checkpoint(min(report.size, len(self)))
        return report

    def _checkpoint_row(self, size: int | None) -> tuple | None:
        """The checkpoint record of the first ``size`` entries (default: all), with its signed
        note; None when there is nothing to vouch for or no key to sign with (an unsigned
        record would be ignored by every reader)."""
        size = len(self) if size is None else size
        if size == 0 or self.signer is None:
            return None
        chain_head, root = self._hashes[size - 1], self.tree.root(size)
        return (size, chain_head, root, time.time(), record_note(self.signer, size, root, chain_head))

    def _record_checkpoint(self, size: int | None = None) -> None:
        row = self._checkpoint_row(size)
        if row is None:
            return
        self._write_aside(
            lambda conn: conn.execute(
                "INSERT OR IGNORE INTO checkpoints (size, chain_head, root, time, note) VALUES (?, ?, ?, ?, ?)", row
            )
        )

    def close(self) -> None:
        """Wait for the commit in flight and what was submitted before, then close the file.
        Idempotent."""
        with self._cv:
            while self._committing or (self._queue and self._committer is not None):
                self._cv.wait()
            if not self._closed:
                with self._follow:
                    self._closed = True
                    self._watch.close()
                self._conn.close()
                os.close(self._writer)
                if self._file is not None:
                    self._file.release()  # after SQLite's connections: see ocrr.ledger.file_locks
                self._cv.notify_all()

    def __enter__(self) -> DurableLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text_as_stored(raw: bytes) -> str | bytes:
    """A TEXT value as a str, or its raw bytes when they are not UTF-8 (written behind the ledger's back)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _not_writable(path: Path, err: BaseException) -> OcrrError:
    return OcrrError(
        f"cannot open ledger {path} for writing ({err}); its folder must be writable (a copy "
        f"in a writable folder will do; `ocrr ledger verify` only reads)"
    )


@contextmanager
def _writers_turn(path: Path) -> Iterator[None]:
    """Hold the file's writer lock, the one every commit takes before its ``BEGIN IMMEDIATE``
    (``_commit``), for an open's own transaction. Waiting in SQLite's busy handler instead, which
    polls with sleeps, an open can be starved past the busy timeout ("database is locked") by
    writers that hand this lock to one another; and a writer waiting there on a long check
    fails the same way."""
    try:
        fd: int | None = os.open(f"{path}-writer", os.O_RDWR)
    except FileNotFoundError:
        # Every DurableLedger creates the lock file and it stays: none has opened this file yet,
        # so no writer to queue with, and a file refused now is left as it was (no lock file).
        fd = None
    except OSError as e:
        raise _not_writable(path, e) from e
    if fd is None:
        yield
        return
    try:
        with _writer_lock(fd):
            yield
    finally:
        os.close(fd)


@contextmanager
def _writer_lock(fd: int) -> Iterator[None]:
    """The file's writer lock (``{path}-writer``, open as ``fd``), taken by every transaction
    that writes the file before its ``BEGIN IMMEDIATE``: the writers of every process queue
    here and are woken as soon as the one before is done."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)  # not left to close: a forked child may still hold the descriptor
