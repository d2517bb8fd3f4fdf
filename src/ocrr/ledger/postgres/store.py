"""The durable ledger kept in PostgreSQL: ``PostgresLedger``, the SQLite store's twin.

Same entries, chain hash, Merkle tree, proofs and checkpoints as the SQLite store: both are
``HeldLedger``s (``ocrr.ledger.held``: group commit, the in-memory mirror, proofs, the checks
of every row taken in), so an export of either imports into the other byte for byte.
Selected by a URL ``postgresql://…`` wherever a ledger path is accepted
(``ocrr.ledger.location``). Tables and triggers: ``ocrr.ledger.postgres.schema``.

Appends. One transaction per group commit: ``SELECT … FROM ocrr_head FOR UPDATE`` (the
head row's lock serialises writers across processes and machines, so ids stay gap-free),
take in what other writers committed since this process last looked (checked), hash the
new entries in Python, then one statement inserts them all (``unnest``) and moves the head,
and ``COMMIT`` returns once the WAL is flushed (``synchronous_commit = on``). In pipeline
mode, ``BEGIN`` goes with the lock and ``COMMIT`` with the insert: two round trips, on a
connection the commits keep (``_on_kept_connection``). Requests that arrive while a
commit runs, or within ``gather`` seconds of the first (when it brings fewer than
``GATHER_BELOW`` rows), go in together (group commit: one WAL flush for all of them).
docs/postgres.md has the measurements.

Followers. ``refresh`` takes in what other processes committed;
``follow`` starts ``ocrr.ledger.postgres.follow.Follower``, a thread that does it on every NOTIFY the insert
trigger sends, on a timer, and after reconnecting.

Closing. ``close()`` closes the pool; a ledger dropped without it closes its pool once
collected (``_close_pool``, a finalizer), from whichever thread the collector runs on.

psycopg 3 and psycopg_pool are imported inside functions: they are the optional extra
``ocrr[postgres]``.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ocrr.errors import LedgerIntegrityError, LedgerStorageError, OcrrError
from ocrr.ledger.group_commit import Pending, checked
from ocrr.ledger.heads import Signer
from ocrr.ledger.held import Apply, HeldLedger, damage_in, read_report
from ocrr.ledger.postgres.follow import Follower
from ocrr.ledger.postgres.scan import ROW_COLUMNS, report_of
from ocrr.ledger.postgres.schema import create_schema
from ocrr.ledger.postgres.url import configure, connect, psycopg_modules, redact
from ocrr.ledger.scan import LedgerReport, Scan
from ocrr.ledger.tail import StoredTail
from ocrr.ledger.verify import HASH_SIZE

__all__ = ["PostgresLedger"]

_WAIT = 5.0  # seconds a request waits for a pooled connection (the database down: then it fails)
#: A group commit of fewer rows waits ``gather`` seconds for concurrent appends to join it; a
#: bigger one (a batched /correct) already shares its WAL flush, and waiting would only delay it.
GATHER_BELOW = 32
# The columns go as binary parameters (%b): as text, every bytea is hex-escaped by the client
# and parsed back by the server, which cost more than the insert itself. The labels and texts
# go as arrays; the vectors, prev hashes, hashes and leaves each as one bytea of equal-width
# rows, which the server slices: the client builds no array of them element by element. The
# entries are inserted only once the head row moved, so a missing head writes nothing.
_SHORT_INSERT = "ocrr: entries inserted with the head moved:"  # what the insert's guard fails with
_INSERT = (
    "WITH moved AS (UPDATE ocrr_head SET size = %(size)s, chain_head = %(chain_head)s, root = %(root)s, "
    "dim = coalesce(dim, %(dim)s) RETURNING 1), "
    "inserted AS (INSERT INTO ocrr_entries (seq, label, text, vector, prev_hash, hash, leaf) "
    "SELECT %(start)s::bigint + i - 1, label, text, "
    "substring(%(vectors)b FROM (i::int - 1) * %(width)s::int + 1 FOR %(width)s::int), "
    "substring(%(prevs)b FROM (i::int - 1) * 32 + 1 FOR 32), substring(%(hashes)b FROM (i::int - 1) * 32 + 1 FOR 32), "
    "substring(%(leaves)b FROM (i::int - 1) * 32 + 1 FOR 32) "
    "FROM unnest(%(labels)b::text[], %(texts)b::text[]) WITH ORDINALITY AS given(label, text, i) "
    "WHERE EXISTS (SELECT FROM moved) RETURNING 1) "
    # The transaction fails unless every entry went in with the head moved (a rule or trigger
    # may drop rows silently): COMMIT, queued behind this in the pipeline, then ends nothing.
    # (The only way to raise an error from plain SQL: a text that is no number, cast to one.)
    f"SELECT CASE WHEN count(*) = %(count)s THEN count(*) ELSE ('{_SHORT_INSERT} ' || count(*))::bigint END "
    "FROM inserted"
)
# The rest of the stored tail (ocrr.ledger.tail.StoredTail): two reads of the entries' primary key.
_TAIL = "SELECT (SELECT hash FROM ocrr_entries WHERE seq = %s), (SELECT max(seq) FROM ocrr_entries)"
# The head row, locked, with the stored tail as of the entries this process holds (``%s``: its
# last id): one round trip when no other writer committed since (the usual case).
# The latest verification record's id comes with it: the appenders' check for damage another
# process recorded (``damage_since``) is answered from it, not by a round trip of its own.
_LOCK_AND_TAIL = (
    "SELECT size, chain_head, (SELECT hash FROM ocrr_entries WHERE seq = %s), (SELECT max(seq) FROM ocrr_entries), "
    "(SELECT max(id) FROM ocrr_verifications) FROM ocrr_head FOR UPDATE"
)


class _NotLocked(Exception):
    """A commit's first round trip failed on a lost connection (``lost``): nothing was written."""

    def __init__(self, lost: BaseException):
        super().__init__(str(lost))
        self.lost = lost


class PostgresLedger(HeldLedger):
    """A ledger in a PostgreSQL schema; acknowledges appends once committed and flushed.

    ``PostgresLedger.open(url)`` creates the tables if missing, checks the whole ledger
    (``verify="full"``) or what follows its last checkpoint (``"checkpoint"``), refuses a
    damaged one naming the first bad entry, and mirrors it in memory as every store does
    (``HeldLedger``). ``path`` is the URL without its password; ``url`` the one to connect with.
    """

    _checks_in_commit = True  # the appenders' damage check costs no round trip of its own (damage_since)

    def __init__(
        self,
        url: str,
        pool,
        schema: str,
        scan: Scan,
        report: LedgerReport,
        apply: Apply | None,
        gather: float,
        unit_rows: bool = False,
    ):
        self.url, self.schema, self._pool = url, schema, pool
        self._slot = _Kept()
        # Dropped unclosed, the ledger still closes its pool: left to the pool's own __del__, the
        # pool's threads and connections go only when the collector gets to it, and its join of
        # those threads fails when it runs on one of them. Not at exit: a daemon committer may
        # still be writing on the kept connection there (the process's end closes them all).
        self._pool_closer = weakref.finalize(self, _close_pool, pool, self._slot)
        self._pool_closer.atexit = False
        self.path = redact(url)  # shown in messages
        self._start_mirror(scan, report)
        self.gather = gather
        self.follower: Any = None  # the Follower taking in others' entries, if one runs
        try:
            self._take_in_scan(scan, apply, unit_rows)
        except BaseException:
            self._pool_closer()
            raise

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        url: str,
        dim: int | None = None,
        verify: str = "full",
        apply: Apply | None = None,
        gather: float = 0.002,
        pool_size: int = 4,
        signer: Signer | None = None,
        unit_rows: bool = False,
    ) -> PostgresLedger:
        """Connect, create the tables if missing, check the ledger; refuse a damaged one.
        ``signer``: signs checkpoint records and is the key whose records are trusted;
        ``unit_rows``: refuse stored rows that break the rows' rules (both as the SQLite
        store's ``open``)."""
        if verify not in ("full", "checkpoint"):
            raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise OcrrError(f"dim must be a positive integer, got {dim!r}")
        if isinstance(gather, bool) or not isinstance(gather, int | float) or not 0 <= gather <= 1:
            raise OcrrError(f"gather must be seconds in [0, 1], got {gather!r}")
        psycopg, psycopg_pool = psycopg_modules()
        conn = connect(url)
        try:
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
            if schema is None:
                raise OcrrError(
                    f"the search_path of {redact(url)} names no existing schema; create the schema first "
                    "(CREATE SCHEMA …) or fix options=-csearch_path in the URL"
                )
            try:
                create_schema(conn, dim)
            except psycopg.errors.InsufficientPrivilege as e:
                raise OcrrError(
                    f"the ledger's tables are missing in schema {schema} of {redact(url)} and this role may not "
                    f"create them ({e.diag.message_primary}); open it once as the schema's owner (docs/postgres.md)"
                ) from None
            vkeys = () if signer is None else (signer.vkey,)
            report, scan = report_of(conn, None if verify == "full" else 0, vkeys)
        except psycopg.Error as e:
            raise OcrrError(f"cannot open the ledger in {redact(url)} ({str(e).strip()})") from None
        finally:
            conn.close()
        if not report:
            where = "" if report.first_bad is None else f" at entry {report.first_bad}"
            raise OcrrError(
                f"ledger {redact(url)} (schema {schema}) is damaged{where}: {report.reason}. Refusing to serve it; "
                f"restore it from a backup (run `ocrr ledger verify {redact(url)}` for the report)"
            )
        assert scan is not None
        if dim is not None and scan.dim is not None and dim != scan.dim:
            raise OcrrError(
                f"ledger {redact(url)} holds vectors of dimension {scan.dim}, not {dim}; use another schema"
            )
        scan.dim = scan.dim or dim
        pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": 10},
            configure=configure,
            check=psycopg_pool.ConnectionPool.check_connection,  # a server restart leaves dead connections
            open=True,
            name="ocrr-ledger",
        )
        ledger = cls(url, pool, schema, scan, report, apply, float(gather), unit_rows)
        ledger.signer = signer
        if not report.checked_from:  # every entry rehashed (a quick open with no record to start from too)
            try:
                ledger._record_checkpoint()
            except OcrrError:
                ledger.close()
                raise
        return ledger

    def _db(self, what: str, fn: Callable, kept: bool = False):
        """Run ``fn(conn)`` on a pooled connection (``kept``: the one kept for commits,
        ``_on_kept_connection``); a database error becomes an OcrrError."""
        psycopg, psycopg_pool = psycopg_modules()
        try:
            if kept and self._pool.max_size > 1:  # (a pool of one: the readers need it too)
                return self._on_kept_connection(fn)
            with self._pool.connection(timeout=_WAIT) as conn:
                return fn(conn)
        except psycopg.IntegrityError as e:  # a row where the ledger's next ones go (rows inserted behind its back)
            self._broken = LedgerIntegrityError(
                f"ledger {self.path}: {what} failed: storage already holds rows where the next entries go "
                f"({str(e).strip()}); run `ocrr ledger verify {self.path}`",
                len(self._hashes),
            )
            raise self._broken from e
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            raise LedgerStorageError(
                f"ledger {self.path}: {what} failed ({str(e).strip()}); check that the database is up"
            ) from e

    # -- appending ----------------------------------------------------------------------
    @property
    def _kept(self) -> Any:
        """The connection the commits run on (``_on_kept_connection``), or None; kept where the
        finalizer finds it too (``_close_pool``)."""
        return self._slot.conn

    @_kept.setter
    def _kept(self, conn: Any) -> None:
        self._slot.conn = conn

    def _on_kept_connection(self, fn: Callable):
        """``fn(conn)`` on the connection kept for commits. The pool checks a connection with
        a round trip each time it hands one out; the committer takes one once and keeps it
        while it works. One the server dropped since (a restart) fails ``fn``'s first round
        trip, before anything is written (``fn`` raises ``_NotLocked``): ``fn`` then runs once
        more on a fresh connection, as the pool's check would have got it."""
        psycopg = psycopg_modules()[0]
        for retry in (False, True):
            reused = self._kept is not None
            conn = self._kept if self._kept is not None else self._pool.getconn(timeout=_WAIT)
            self._kept = conn
            try:
                return fn(conn)
            except _NotLocked as e:
                self._drop_kept()
                if reused and not retry:
                    continue
                raise e.lost from None
            except psycopg.Error:
                if conn.closed or conn.broken:
                    self._drop_kept()
                raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _drop_kept(self) -> None:
        """Give the kept connection back to the pool (which discards a broken one)."""
        if self._kept is not None:
            conn, self._kept = self._kept, None
            self._pool.putconn(conn)

    def _commit_all(self, batch: list[Pending]) -> None:
        if self.gather and len(batch) == 1 and len(batch[0].labels) < GATHER_BELOW:
            # A few rows alone: let concurrent requests join for a few ms.
            time.sleep(self.gather)
            with self._cv:
                batch, self._queue = batch + self._queue, []
        super()._commit_all(batch)

    def _commit(self, batch: list[Pending]) -> None:
        n0: list[int] = []
        state: dict = {}
        locked: list[bool] = []  # [True] once the head's lock is held

        def write(conn) -> None:
            # Pipeline mode: BEGIN goes out with the head's lock, and COMMIT with the insert:
            # two round trips per commit, each a wake-up of this thread. (BEGIN and COMMIT are
            # sent as statements: a transaction block in a pipeline syncs at its own edges.)
            psycopg = psycopg_modules()[0]
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    inserted = locked_write(conn)
                    conn.execute("COMMIT" if inserted is not None else "ROLLBACK")  # ROLLBACK: nothing to write
                    if inserted is not None:  # while the server inserts and commits: the next group's hashes
                        self._hash_next(n0[0] + len(state["digests"]), state["digests"][-1])
            except BaseException as e:
                if conn.info.transaction_status in (
                    psycopg.pq.TransactionStatus.INTRANS,
                    psycopg.pq.TransactionStatus.INERROR,
                ):  # failed before COMMIT, or a statement failed and COMMIT was skipped: end it
                    with contextlib.suppress(psycopg.Error):  # the connection is lost: it is dropped
                        conn.rollback()
                if isinstance(e, psycopg.OperationalError) and not locked:
                    raise _NotLocked(e) from e  # lost before the head's lock: nothing was written
                if isinstance(e, psycopg.DataError) and _SHORT_INSERT in str(e):
                    raise self._short_insert(e, len(state["digests"])) from None
                raise
            # Leaving the pipeline waited for COMMIT: the WAL is flushed (synchronous_commit = on),
            # and every entry went in with the head moved (the insert's guard).

        def locked_write(conn):
            """In the transaction: the head's lock, the checks, the insert queued (its cursor), or
            None when nothing is to be written."""
            held = len(self._hashes)
            lock = conn.execute(_LOCK_AND_TAIL, (held - 1,))
            self._hash_ahead(batch)  # while the server takes the lock: the rows, as the lock will likely allow
            size, stored_head, last, top, verified = lock.fetchone()
            locked.append(True)
            ready = self._checks_in_transaction(conn, verified, checked, batch)  # (under the head's lock)
            if not ready:
                return None
            with self._follow:
                if self._take_in_db(conn, size) or len(self._hashes) != held:
                    # Others' entries came first: the tail is read again after them.
                    last, top = conn.execute(_TAIL, (len(self._hashes) - 1,)).fetchone()
                self._check_tail(StoredTail(size, bytes(stored_head), last and bytes(last), top))
                ok, dim = self._same_dim(ready)
                if not ok:
                    return None
                hashed, nodes = self._hashed_of(ok)
                start, count = hashed.start, len(hashed.digests)
                n0.append(start)
                self._own = (start, start + count)
                root = self.tree.root(start + count)
            chain = hashed.chain()
            inserted = conn.execute(
                _INSERT,
                {
                    "size": start + count,
                    "chain_head": hashed.digests[-1],
                    "root": root,
                    "dim": dim,
                    "start": start,
                    "labels": [label for p in ok for label in p.labels],
                    "texts": [text for p in ok for text in p.texts],
                    "width": len(hashed.vectors[0]) // len(ok[0].labels),
                    "vectors": b"".join(hashed.vectors),
                    "prevs": chain[:-HASH_SIZE],
                    "hashes": chain[HASH_SIZE:],
                    "leaves": nodes[0][2],  # the leaves' run comes first
                    "count": count,
                },
            )
            digests = hashed.digests
            state.update(ok=ok, dim=dim, digests=digests)
            return inserted

        try:
            if self._broken is not None:
                raise self._broken
            self._db("an append", write, kept=True)
        except BaseException as e:
            err = e if isinstance(e, OcrrError) else LedgerStorageError(f"ledger {self.path}: append failed ({e})")
            self._commit_failed(n0[0] if n0 else None, batch, err)
            return
        if not state:  # every item had the wrong dimension: failed by _same_dim
            return
        self._commit_done(state["ok"], state["digests"], state["dim"])

    def _short_insert(self, e: BaseException, given: int) -> LedgerIntegrityError:
        """The insert's guard failed: the database kept fewer entries than it was given, or did
        not move the head (a rule or trigger added behind the ledger's back); nothing was
        committed. Fails closed, as rows found inserted or removed do."""
        # the count the statement reached, as the server's message spells it (digits only, bounded)
        found = re.match(r"\s*(\d{1,19})", str(e).split(_SHORT_INSERT, 1)[1])
        kept = found.group(1) if found else "fewer"
        self._broken = LedgerIntegrityError(
            f"ledger {self.path}: the database kept {kept} of the {given} entries of an append with the "
            "head moved (a rule or trigger on ocrr_entries or ocrr_head drops rows?); nothing was appended. "
            f"Remove it, then reopen the ledger and run `ocrr ledger verify {self.path}`",
            len(self._hashes),
        )
        return self._broken

    # -- other processes' entries -------------------------------------------------------
    def refresh(self) -> int:
        """Take in what other processes committed since this one last looked (``pull``), unless
        a follower keeps this ledger current: then nothing (a replica answers from the prefix it
        holds, without a round trip to the database per request, and goes on answering while
        the database is out of reach; the follower catches up when it is back)."""
        if self.follower is not None:
            return 0
        return self.pull()

    def pull(self) -> int:
        """Take in what other processes committed since this one last looked (checked: each
        entry must chain on from the ones held); return how many. Never waits for a commit:
        while one of ours is in flight, it has taken in everything before it already."""
        if self._closed:
            return 0
        with self._follow:
            if self._own is not None or self._closed:
                return 0
            return self._db("reading new entries", lambda conn: self._take_in_db(conn, None))

    def _take_in_db(self, conn, size: int | None) -> int:
        """Under ``_follow``: add the database's entries past ours (up to ``size``, the head
        read under the lock, or the committed head now) to the tree, chain and mirror."""
        if size is None:
            size = conn.execute("SELECT size FROM ocrr_head").fetchone()[0]
        n0 = len(self._hashes)
        if size < n0:
            self._broken = LedgerIntegrityError(
                f"ledger {self.path}: the database's head says {size} entries but {n0} were committed "
                f"(entries removed or the head rewritten); run `ocrr ledger verify {self.path}`",
                size,
            )
            raise self._broken
        if size == n0:
            return 0
        if self._broken is not None:
            raise self._broken
        try:
            if self.dim is None:
                self.dim = conn.execute("SELECT dim FROM ocrr_head").fetchone()[0]
            rows = conn.execute(
                f"SELECT {ROW_COLUMNS} FROM ocrr_entries WHERE seq >= %s AND seq < %s ORDER BY seq", (n0, size)
            ).fetchall()
        except BaseException as e:  # the database failed mid-read: fail closed, as the take-in does
            raise self._take_in_failed(e, "replicas") from e
        return self._take_in_rows(rows, size, "replicas")

    # -- reading ------------------------------------------------------------------------
    def read_entries(self, lo: int = 0, hi: int | None = None):
        """Yield (id, label, text, vector bytes, prev_hash, hash) from the database, in id order."""
        hi = len(self) if hi is None else hi

        def read(conn) -> list:
            q = (
                "SELECT seq, label, text, vector, prev_hash, hash FROM ocrr_entries "
                "WHERE seq >= %s AND seq < %s ORDER BY seq"
            )
            return [(s, lab, t, bytes(v), bytes(p), bytes(h)) for s, lab, t, v, p, h in conn.execute(q, (lo, hi))]

        yield from self._db("reading entries", read)

    @contextlib.contextmanager
    def _row_reader(self) -> Iterator[Callable[[int, int], list[tuple]]]:
        """The rows ``lo``..``hi - 1`` as stored now, each read on a pooled connection. A read
        raises LedgerStorageError when the database cannot be reached (that is no damage)."""

        def read(lo: int, hi: int) -> list[tuple]:
            return self._db(
                "reading entries",
                lambda conn: conn.execute(
                    f"SELECT {ROW_COLUMNS} FROM ocrr_entries WHERE seq >= %s AND seq < %s ORDER BY seq", (lo, hi)
                ).fetchall(),
            )

        yield read

    def scan(self, verify: str = "full", rows: bool = True) -> tuple[LedgerReport, Scan | None]:
        """Check the ledger as stored now (read-only): the report, and what it holds when intact
        (with its rows whatever ``rows`` says)."""
        return self._db("the check", lambda conn: report_of(conn, None if verify == "full" else 0, self.vkeys))

    # -- records beside the log ---------------------------------------------------------
    def _record_checkpoint(self, size: int | None = None) -> None:
        row = self._checkpoint_row(size)
        if row is None:
            return
        self._db(
            "recording a checkpoint",
            lambda conn: conn.execute(
                "INSERT INTO ocrr_checkpoints (size, chain_head, root, time, note) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                row,
            ),
        )

    def record_verification(self, report: dict) -> None:
        """Keep a verification's outcome in the database (append-only: every one is kept), where
        every replica sees it; a report with ``ok`` false is how damage reaches the others."""
        row = (float(report["time"]), json.dumps(report))
        self._db(
            "recording a verification",
            lambda conn: conn.execute("INSERT INTO ocrr_verifications (time, report) VALUES (%s, %s)", row),
        )

    def data_version(self) -> int | None:
        """None: PostgreSQL has no cheap counter of every change (a row edited in place included),
        so /verify never reuses an earlier result for a database ledger."""
        return None

    def damage_since(self, after: int, wait: bool = True) -> tuple[int, dict | None] | None:
        """The latest verification record's id past ``after`` (or ``after``), and the first of
        those records that reports damage (or None). None when closed or the database is down,
        and with ``wait=False`` (the predict path, on the event loop: no round trip there; a
        follower's ``on_tick`` looks instead)."""
        if self._closed or not wait:
            return None
        checking = self._checking
        if checking is not None and checking[0] == threading.get_ident():
            # Asked by an appender's check, in our commit's transaction: it read the latest
            # record's id with the head's lock; only when there is a newer one read them.
            _, conn, latest = checking
            if latest <= after:
                return after, None
            return _records_past(conn, after)
        try:
            return self._db("reading verifications", lambda conn: _records_past(conn, after))
        except OcrrError:
            return None

    def last_verification(self) -> dict | None:
        row = self._db(
            "reading verifications",
            lambda conn: conn.execute("SELECT report FROM ocrr_verifications ORDER BY id DESC LIMIT 1").fetchone(),
        )
        return None if row is None else read_report(row[0], "the database")

    def follow(
        self,
        every: float,
        on_error: Callable[[OcrrError], None] | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> Follower:
        """Start a follower thread (``ocrr.ledger.postgres.follow``) that keeps this replica
        current: on every NOTIFY, at least every ``every`` seconds and after reconnecting;
        ``on_error`` gets the damage that stops it, ``on_tick`` runs after every look.
        Returns once it has caught up once (or after 10 s: requests then pull themselves)."""
        follower = Follower(self, every, on_error=on_error, on_tick=on_tick).start()
        follower.listening.wait(10)
        return follower

    def close(self) -> None:
        """Stop the follower, wait for the commit in flight, then close the pool (and the kept
        connection). Idempotent."""
        if self.follower is not None:
            self.follower.stop()
        with self._cv:
            while self._committing:
                self._cv.wait()
            if not self._closed:
                with self._follow:
                    self._closed = True
                self._pool_closer()  # (runs once: a later collection finds nothing to do)
                self._cv.notify_all()


class _Kept:
    """A ledger's kept connection (``PostgresLedger._kept``), shared with its finalizer, which
    must not hold the ledger itself (it would never be collected)."""

    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Any = None


def _close_pool(pool, slot: _Kept) -> None:
    """Close ``pool``, then the kept connection (a pool closes a connection given back once it
    is closed). Called by ``close()``, or once a ledger dropped unclosed is collected: then on
    whatever thread the collector ran, where nothing of the ledger runs any more (a commit in
    flight holds the ledger). The pool's close joins the pool's threads; on one of those, a
    thread of its own does it instead (a thread cannot join itself)."""
    if _joined_by_close(pool):
        with contextlib.suppress(RuntimeError):  # no new thread at interpreter shutdown: its end closes them
            threading.Thread(target=_close_pool, args=(pool, slot), name="ocrr-ledger-close", daemon=True).start()
        return
    pool.close()
    conn, slot.conn = slot.conn, None
    if conn is not None:
        pool.putconn(conn)


def _joined_by_close(pool) -> bool:
    """Whether the current thread is one ``pool.close()`` joins: the pool's workers and its
    scheduler (psycopg_pool keeps them in private attributes; without those, any thread but
    the main one may be)."""
    current = threading.current_thread()
    workers = getattr(pool, "_workers", None)
    if not isinstance(workers, list):
        return current is not threading.main_thread()
    return current in workers or current is getattr(pool, "_sched_runner", None)


def _records_past(conn, after: int) -> tuple[int, dict | None]:
    """``damage_in`` of the verification records past ``after``, or damage if one of them holds
    an id its sequence never gave: inserted with an id from outside, above the ones the
    sequence gives every later record, it would put those under each process's cursor, so
    damage one of them records would go unseen by the others."""
    rows = conn.execute("SELECT id, report FROM ocrr_verifications WHERE id > %s ORDER BY id", (after,)).fetchall()
    found = damage_in(rows, after, "the database")
    if not rows or found[1] is not None:
        return found
    given = conn.execute(
        "SELECT pg_sequence_last_value(pg_get_serial_sequence(quote_ident(current_schema()) || '.ocrr_verifications', "
        "'id'))"
    ).fetchone()[0]
    if given is None or rows[-1][0] > given:
        why = f"a verification record holds id {rows[-1][0]}, which its sequence never gave (it is at {given})"
        return found[0], {"ok": False, "reason": f"{why}: a record was added outside the ledger"}
    return found
