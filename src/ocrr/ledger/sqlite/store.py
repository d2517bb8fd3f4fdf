"""The durable ledger: appends acknowledged only once on disk, shared commits, checked reopening.

SQLite runs in WAL mode with ``synchronous=FULL``, so a commit is on disk when it
returns; the log is copied into the file by the ledger's own thread, never inside a commit
(``ocrr.ledger.sqlite.wal``). ``append`` returns only after its entry is committed; appends that arrive while
a commit is running wait and then go in one transaction together (group commit: one
fsync for all of them; the queue is ``ocrr.ledger.group_commit``). On open, the whole
file is checked (``verify="full"``) or only what follows the last recorded checkpoint
(``verify="checkpoint"``); a broken file is refused with the first bad entry (the file
format: ``ocrr.ledger.sqlite.schema``; the check: ``ocrr.ledger.sqlite.scan``).
Vectors and the hash chain are mirrored in memory (``memory``, an in-memory ``Chain``,
or whatever ``apply`` feeds, e.g. a substrate; ``ocrr.ledger.held``, shared by every
store); that mirror is a cache of the file, rebuilt on every open.

Several processes may append to one file (the workers of ``ocrr serve --workers N``):
SQLite lets one of them write at a time, and each commit first takes in, checked, the
entries the others committed since (they chain on from what this process holds), so ids
and the chain stay one sequence, then checks that the file ends where this process does
(``ocrr.ledger.tail``: rows removed or inserted behind its back fail it closed). All of them
must reach the file through one name (``ocrr.ledger.sqlite.locks``). ``refresh`` takes them in without writing, which a
reader does before it answers, so it answers for every acknowledged correction.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger.group_commit import Pending, checked
from ocrr.ledger.heads import Signer
from ocrr.ledger.held import Apply, HeldLedger, damage_in, read_report
from ocrr.ledger.scan import Damage, LedgerReport, Scan
from ocrr.ledger.sqlite.inserts import check_json_functions, insert_entries, insert_nodes
from ocrr.ledger.sqlite.locks import FileHold, join_writers
from ocrr.ledger.sqlite.scan import KnownPrefix, report_of, scan_file
from ocrr.ledger.sqlite.schema import VERIFICATIONS_TABLE, add_note_column, adopt_v1, connect, create_tables
from ocrr.ledger.sqlite.wal import BackgroundCheckpoints, no_checkpoints_in_commits
from ocrr.ledger.tail import StoredTail
from ocrr.ledger.verify import HASH_SIZE

__all__ = ["Apply", "DamagedFile", "DurableLedger", "LedgerReport", "record_verification_in", "scan_file"]

_BATCH = 65_536
_VERIFICATIONS_KEPT = 100  # outcomes of /verify kept in the file
_LARGEST_ROWID = 2**63 - 1  # past it SQLite numbers new rows at random
# About what one entry (beside its vector) and one tree node add to the log, for the checkpoints.
_ROW_BYTES, _NODE_BYTES = 128, 48
# The stored tail (ocrr.ledger.tail.StoredTail) in one statement: point reads on two primary keys.
_TAIL = (
    "SELECT (SELECT value FROM meta WHERE key = 'size'), (SELECT value FROM meta WHERE key = 'chain_head'), "
    "(SELECT hash FROM entries WHERE id = ?), (SELECT max(id) FROM entries)"
)
# A group commit's first read: the stored tail and the latest verification record's id. The
# appenders' check for damage another process recorded (``damage_since``) is answered from it,
# and the entries other processes committed are read only when the size says there are some.
_TAIL_AND_VERIFIED = _TAIL + ", (SELECT max(id) FROM verifications)"
# The head moves in one statement (one step: the GIL let go and taken back once, not per row).
_MOVE_HEAD = (
    "UPDATE meta SET value = CASE key WHEN 'size' THEN ?1 WHEN 'chain_head' THEN ?2 ELSE ?3 END "
    "WHERE key IN ('size', 'chain_head', 'dim')"
)


class DamagedFile(OcrrError):
    """``DurableLedger.open`` refused a file whose check failed; ``report`` says where and why
    (``migrate``, which opens a copy of its source, names the source with it)."""

    def __init__(self, message: str, report: LedgerReport):
        super().__init__(message)
        self.report = report


class DurableLedger(HeldLedger):
    """A ledger file that acknowledges appends only once they are on disk.

    ``DurableLedger.open(path)`` creates or opens the file, checks it and mirrors it in
    memory: ``memory`` is a plain ``Chain`` unless ``apply`` is given, in which case
    ``apply`` receives the stored entries on open and every committed batch afterwards
    (the persistent substrate feeds its ledger and index this way). ``lock`` (an RWLock)
    is held for writing while the mirror changes; read the mirror under ``lock.read()``.
    Thread-safe.
    """

    path: Path
    _checks_in_commit = True  # the appenders' damage check costs no statement of its own (damage_since)

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        scan: Scan,
        report: LedgerReport,
        apply: Apply | None,
        unit_rows: bool = False,
    ):
        self.path, self._conn = path, conn
        self._start_mirror(scan, report)
        try:
            self._watch = connect(path)  # reads the file's size for refresh, beside the writing connection
            # Writers of other processes queue on this lock file, not in SQLite's busy handler, which
            # polls with sleeps of up to 100 ms (two writers there: docs/reference/measurements.md).
            self._writer = os.open(f"{path}-writer", os.O_RDWR | os.O_CREAT, 0o644)
            # Commits only fsync the log; a thread of this ledger copies it into the file
            # (ocrr.ledger.sqlite.wal), so no correction waits for a checkpoint.
            no_checkpoints_in_commits(conn)
            no_checkpoints_in_commits(self._watch)
            self.wal = BackgroundCheckpoints(path, writers_turn=lambda: _writers_turn(path))
            # A ledger dropped without close() lets its checkpoint thread, connections, lock
            # file and hold on the file go with it (close() runs the same two steps).
            self._stop_checkpoints = weakref.finalize(self, self.wal.close)
            self._holds: list[FileHold] = []  # the file held as one of its writers (``open``)
            self._let_go = weakref.finalize(self, _let_go, self._watch, conn, self._writer, self._holds)
        except (OSError, sqlite3.Error) as e:
            conn.close()
            if hasattr(self, "_watch"):
                self._watch.close()
            if hasattr(self, "_writer"):
                os.close(self._writer)
            raise _not_writable(path, e) from e
        self._version: int | None = None  # PRAGMA data_version at the last refresh
        try:
            self._take_in_scan(scan, apply, unit_rows)
        except BaseException:
            self._stop_checkpoints()
            self._let_go()
            raise

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        dim: int | None = None,
        verify: str = "full",
        apply: Apply | None = None,
        signer: Signer | None = None,
        known: KnownPrefix | None = None,
        unit_rows: bool = False,
    ) -> DurableLedger:
        """Open (creating if missing) and check a ledger file; refuse a broken one.

        ``signer``: the key that signs the checkpoint records of full checks, and whose
        records ``verify="checkpoint"`` trusts to skip rehashing the entries before them.
        Without one, nothing is recorded and every entry is rehashed on every open.
        ``known``: its first entries as another process of this service read and checked them
        (``KnownPrefix``): only the entries after them are read from the file. ``unit_rows``:
        refuse stored rows that break the rows' rules (finite, unit norm), naming the first;
        a substrate's opens ask it."""
        path = Path(path).expanduser()
        if verify not in ("full", "checkpoint"):
            raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise OcrrError(f"dim must be a positive integer, got {dim!r}")
        if not path.exists() and not path.parent.is_dir():
            raise OcrrError(f"cannot create ledger {path}: directory {path.parent} does not exist; create it first")
        path = path.resolve()  # symlinks followed: SQLite keeps its log beside the file's own name, so does ocrr
        writer = join_writers(path)  # before SQLite opens it: one name per file (ocrr.ledger.sqlite.locks)
        try:
            return cls._open_held(path, writer, dim, verify, apply, signer, known, unit_rows)
        except BaseException:
            writer.release()
            raise

    @classmethod
    def _open_held(
        cls,
        path: Path,
        writer: FileHold,
        dim: int | None,
        verify: str,
        apply: Apply | None,
        signer: Signer | None,
        known: KnownPrefix | None = None,
        unit_rows: bool = False,
    ) -> DurableLedger:
        """``open``, once the file is held as one of its writers (``writer``, let go on close)."""
        conn: sqlite3.Connection | None = None
        try:
            conn = connect(path)
            check_json_functions(conn)  # what the appends write with: refused now, not at the first one
            with _writers_turn(path):  # queue with the writers (see _writers_turn)
                try:
                    conn.execute("BEGIN IMMEDIATE")  # no other writer while we check the file
                    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    if not tables:
                        create_tables(conn, dim)
                    elif "meta" not in tables:
                        raise OcrrError(
                            f"{path} is an SQLite file but not an ocrr ledger (no meta table); pass another path"
                        )
                    elif "nodes" not in tables:  # written by Ledger.save / Ledger.open: add the tree
                        adopt_v1(conn)
                    elif "checkpoints" in tables:  # (a file without it: the scan says so)
                        add_note_column(conn)  # a file from before signed checkpoint records
                    if tables and "verifications" not in tables:
                        conn.execute(VERIFICATIONS_TABLE)  # a file from before them: each commit reads it
                    vkeys = () if signer is None else (signer.vkey,)
                    report, scan = report_of(conn, None if verify == "full" else 0, vkeys, known=known)
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
            raise DamagedFile(
                f"ledger {path} is damaged{where}: {report.reason}. Refusing to serve it; restore "
                f"the file from a backup (run `ocrr ledger verify {path}` for the report)",
                report,
            )
        assert scan is not None  # an intact report comes with what the scan read
        if dim is not None and scan.dim is not None and dim != scan.dim:
            conn.close()
            raise OcrrError(f"ledger {path} holds vectors of dimension {scan.dim}, not {dim}; use another file")
        scan.dim = scan.dim or dim
        ledger = cls(path, conn, scan, report, apply, unit_rows)
        ledger.signer = signer
        ledger._holds.append(writer)
        if not report.checked_from:  # every entry rehashed (a quick open with no record to start from too)
            try:
                ledger._record_checkpoint()  # (written in line with the writers: _write_aside)
            except BaseException:
                ledger.close()
                raise
        return ledger

    def read_entries(self, lo: int = 0, hi: int | None = None):
        """Yield (id, label, text, vector bytes, prev_hash, hash) from the file, in id order."""
        hi = len(self) if hi is None else hi
        conn = connect(self.path, readonly=True)
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

        self._write_aside(lambda conn: _insert_verification(conn, report))

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
        checking = self._checking
        if checking is not None and checking[0] == threading.get_ident():
            # Asked by an appender's check, in our commit's write transaction: it read the latest
            # record's id; only when there is a newer one read them.
            _, conn, latest = checking
            if latest <= after:
                return after, None
            rows = conn.execute("SELECT id, report FROM verifications WHERE id > ? ORDER BY id", (after,)).fetchall()
            return _numbered(conn, damage_in(rows, after, "the file"), rows)
        if not self._follow.acquire(blocking=wait):
            return None
        try:
            if self._closed:
                return None
            try:
                rows = self._watch.execute(
                    "SELECT id, report FROM verifications WHERE id > ? ORDER BY id", (after,)
                ).fetchall()
                return _numbered(self._watch, damage_in(rows, after, "the file"), rows)
            except sqlite3.OperationalError:  # a file from before the table: none recorded yet
                return after, None
        finally:
            self._follow.release()

    @contextmanager
    def _row_reader(self) -> Iterator[Callable[[int, int], list[tuple]]]:
        """The file's rows ``lo``..``hi - 1`` as they are now (rows that cannot be read:
        damage), read on one read-only connection for several reads; each read is its own
        transaction, so none holds back the WAL's checkpoints between reads."""
        conn = connect(self.path, readonly=True)

        def read(lo: int, hi: int) -> list[tuple]:
            try:
                return conn.execute(
                    "SELECT id, label, text, vector, prev_hash, hash FROM entries WHERE id >= ? AND id < ? ORDER BY id",
                    (lo, hi),
                ).fetchall()
            except sqlite3.Error as e:
                raise Damage(lo, f"entries {lo}..{hi - 1} could not be read ({e})") from None

        try:
            yield read
        finally:
            conn.close()

    def last_verification(self) -> dict | None:
        """The latest outcome ``record_verification`` kept (by any process), or None."""
        conn = connect(self.path, readonly=True)
        try:
            row = conn.execute("SELECT report FROM verifications ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # a file from before the table, none recorded yet
            row = None
        finally:
            conn.close()
        return None if row is None else read_report(row[0], "the file")

    # -- appending ----------------------------------------------------------------------

    def _commit(self, batch: list[Pending]) -> None:
        conn, n0 = self._conn, None
        try:
            with _writer_lock(self._writer):  # wait here, woken as soon as the other writer is done
                try:
                    conn.execute("BEGIN IMMEDIATE")  # the file's one writer until COMMIT, across processes
                    held = len(self._hashes)
                    *tail, verified = conn.execute(_TAIL_AND_VERIFIED, (held - 1,)).fetchone()
                    ready = self._checks_in_transaction(conn, verified, checked, batch)
                    if not ready:
                        conn.execute("ROLLBACK")
                        return
                    with self._follow:
                        # Entries other processes committed come first; none can come now (we hold the lock).
                        if self._take_in(conn, tail[0]) or len(self._hashes) != held:
                            tail = conn.execute(_TAIL, (len(self._hashes) - 1,)).fetchone()  # read after them
                        self._check_tail(StoredTail(*tail))
                        ok, dim = self._same_dim(ready)
                        if not ok:
                            conn.execute("ROLLBACK")
                            return
                        hashed, nodes = self._hashed_of(ok)
                        n0, count = hashed.start, len(hashed.digests)
                        self._own = (n0, n0 + count)
                    insert_entries(conn, hashed)
                    insert_nodes(conn, nodes)
                    conn.execute(_MOVE_HEAD, (n0 + count, hashed.digests[-1], dim))
                    conn.execute("COMMIT")  # returns once the WAL is fsynced (synchronous=FULL)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except BaseException as e:
            self._commit_failed(n0, batch, self._write_error(e))
            return
        node_count = sum(len(run) for _, _, run in nodes) // HASH_SIZE
        self.wal.committed(sum(map(len, hashed.vectors)) + count * _ROW_BYTES + node_count * _NODE_BYTES)
        self._commit_done(ok, hashed.digests, dim)  # the mirror follows the file

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
            if self._own is not None:
                self._version = version  # only our own commit's rows (fed by it)
                return 0
            self._watch.execute("BEGIN")  # one snapshot of the file
            try:
                tail = StoredTail(*self._watch.execute(_TAIL, (len(self._hashes) - 1,)).fetchone())
                if tail.size <= len(self._hashes):
                    # Nothing new, but the file changed: it must still end where this ledger
                    # does (rows removed or inserted behind its back fail it closed now, not
                    # at the next append).
                    self._check_tail(tail)
                    got = 0
                else:
                    got = self._take_in(self._watch)
            finally:
                self._watch.execute("COMMIT")
            self._version = version
            return got

    def _take_in(self, conn: sqlite3.Connection, size: int | None = None) -> int:
        """Under ``_follow``, in a transaction on ``conn``: add the file's entries past ours to
        the tree, the chain and the mirror, each checked to chain on from the one before
        (``size``: the file's, if this transaction read it already)."""
        if size is None:
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
        except BaseException as e:  # the file could not be read: refuse to go on until reopened
            raise self._take_in_failed(e, "processes") from e
        return self._take_in_rows(rows, size, "processes")

    # -- checking -----------------------------------------------------------------------
    def scan(self, verify: str = "full", rows: bool = True) -> tuple[LedgerReport, Scan | None]:
        """Check the file as it is on disk now (read-only): the report, and what it holds when
        intact (``rows`` False: without its vectors, labels and texts)."""
        return scan_file(self.path, verify, self.vkeys, rows)

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
                self._stop_checkpoints()
                with self._follow:
                    self._closed = True
                    self._let_go()
                self._cv.notify_all()


def _let_go(watch: sqlite3.Connection, conn: sqlite3.Connection, writer: int, holds: list[FileHold]) -> None:
    """Close a ledger's connections, then its writers' lock file, then let go of its hold on
    the file (after SQLite's connections: see ocrr.ledger.sqlite.locks)."""
    watch.close()
    conn.close()
    os.close(writer)
    for hold in holds:
        hold.release()


def _text_as_stored(raw: bytes) -> str | bytes:
    """A TEXT value as a str, or its raw bytes when they are not UTF-8 (written behind the ledger's back)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def record_verification_in(path: str | os.PathLike[str], report: dict) -> None:
    """``DurableLedger.record_verification`` by a process that does not hold the ledger open (a
    service's supervisor): the same record, written in a transaction of its own, in line with
    the file's writers."""
    path = Path(path)
    with _writers_turn(path):
        conn = connect(path)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _insert_verification(conn, report)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.close()


def _numbered(conn: sqlite3.Connection, found: tuple[int, dict | None], new: list) -> tuple[int, dict | None]:
    """``found`` (``damage_in`` of the records ``new`` past the caller's cursor), or damage if
    the kept records are not numbered one after another, as the ledger numbers them. A record
    given SQLite's largest id from outside makes it number every later one at random, mostly
    under the cursor of every process, so damage one of them records would go unseen."""
    if not new or found[1] is not None:
        return found
    count, low, high = conn.execute("SELECT count(*), min(id), max(id) FROM verifications").fetchone()
    if high == _LARGEST_ROWID:
        why = f"a verification record holds id {high}, the largest SQLite has, which the ledger never gives"
    elif count and high - low + 1 != count:
        why = f"the verification records are numbered {low}..{high} but there are {count}"
    else:
        return found
    return found[0], {"ok": False, "reason": f"{why}: records were added or removed in the file outside the ledger"}


def _insert_verification(conn: sqlite3.Connection, report: dict) -> None:
    conn.execute(VERIFICATIONS_TABLE)  # files from before the table
    cur = conn.execute(
        "INSERT INTO verifications (time, report) VALUES (?, ?)", (float(report["time"]), json.dumps(report))
    )
    # The latest few only: the file must not grow with every call.
    rowid = cur.lastrowid
    assert rowid is not None  # set by the INSERT just run
    conn.execute("DELETE FROM verifications WHERE id <= ?", (rowid - _VERIFICATIONS_KEPT,))


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
