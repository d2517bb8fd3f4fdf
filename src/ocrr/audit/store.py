"""The durable ledger: the hash chain and its Merkle tree in one SQLite file.

File layout (a superset of ``Ledger.save``'s v1 file, so ``Ledger.load`` still reads it):

* ``entries``: one row per entry, exactly as ``Ledger`` stores them;
* ``nodes``: every complete Merkle subtree hash (level, index, hash), leaves included;
* ``meta``: format, dim, and the size and chain head of the last commit;
* ``checkpoints``: (size, chain head, root, time) of every successful full verification.

SQLite runs in WAL mode with ``synchronous=FULL``, so a commit is on disk when it
returns. ``append`` returns only after its entry is committed; appends that arrive while
a commit is running wait and then go in one transaction together (group commit: one
fsync for all of them). On open, the whole file is checked (``verify="full"``) or only
what follows the last recorded checkpoint (``verify="checkpoint"``); a broken file is
refused with the first bad entry. Vectors and the hash chain are mirrored in memory
(``memory``, an ordinary ``Ledger``, or whatever ``apply`` feeds, e.g. a substrate);
that mirror is a cache of the file, rebuilt on every open.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ocrr.audit.merkle import MerkleTree
from ocrr.audit.verify import ProofError, entry_bytes
from ocrr.errors import OcrrError
from ocrr.ledger import GENESIS, Ledger

__all__ = ["DurableLedger", "LedgerReport", "scan_file"]

_FORMAT, _VERSION = "ocrr-ledger", 1
_F4LE = np.dtype("<f4")
_BATCH = 65_536

# apply(vectors (m, d) float32, labels, texts) -> the in-memory chain head afterwards:
# feeds committed entries to the in-memory side, which must hash them to the same chain.
Apply = Callable[[np.ndarray, list, list], bytes]


@dataclass(frozen=True)
class LedgerReport:
    """Outcome of checking a ledger file; truthy iff it is intact."""

    ok: bool
    size: int
    first_bad: int | None
    reason: str
    root: str | None = None  # base64, when ok (as in heads, proofs and checkpoints)
    chain_head: str | None = None
    checked_from: int = 0  # entries before this were vouched for by a checkpoint

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict:
        return asdict(self)


class _Damage(Exception):
    """The file is broken at ``first_bad``: raised inside the scan, turned into a report."""

    def __init__(self, first_bad: int | None, reason: str):
        super().__init__(reason)
        self.first_bad, self.reason = first_bad, reason


@dataclass
class _Scan:
    """What a scan read: the columns of every entry and the tree rebuilt from them."""

    dim: int | None
    labels: list
    texts: list
    vectors: np.ndarray
    hashes: list
    tree: MerkleTree


_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, label TEXT NOT NULL, text TEXT, "
    "vector BLOB NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, "
    "PRIMARY KEY (level, idx)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, chain_head BLOB NOT NULL, "
    "root BLOB NOT NULL, time REAL NOT NULL)",
)
_MAX_DIM = 1 << 16


def _schema(conn: sqlite3.Connection, dim: int | None) -> None:
    """Create the tables inside the caller's transaction (executescript would commit it)."""
    for statement in _TABLES:
        conn.execute(statement)
    conn.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                     [("format", _FORMAT), ("version", _VERSION), ("dim", dim), ("size", 0),
                      ("chain_head", GENESIS), ("durable", 1)])


def _adopt_v1(conn: sqlite3.Connection) -> None:
    """Give a plain ``Ledger`` file (no tree) its Merkle nodes and commit record, inside
    the caller's transaction. Leaves come from the stored fields, so the scan that follows
    still compares every entry with its stored hash and link; the caller rolls back if not."""
    for statement in _TABLES:
        conn.execute(statement)
    tree, nodes, last, n = MerkleTree(), [], GENESIS, 0
    for id_, label, text, vec, prev, digest in conn.execute(
            "SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id"):
        try:
            pre = entry_bytes(id_, label, text, vec, prev)
        except (TypeError, AttributeError, ProofError, struct.error):
            pre = b""  # a malformed row: the scan names it
        nodes.extend(tree.append(hashlib.sha256(b"\x00" + pre).digest()))
        last, n = digest, n + 1
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                     [("size", n), ("chain_head", last), ("durable", 1)])


def _scan(conn: sqlite3.Connection, trust_until: int | None) -> _Scan:
    """Read and check every entry; raise _Damage at the first problem.

    Entries before ``trust_until`` (the last checkpoint) are not rehashed: their stored
    leaves build the tree, and the checkpoint's root and chain head must match it.
    ``None`` trusts nothing (a full check)."""
    meta = {k: v for k, v in conn.execute("SELECT key, value FROM meta")}
    if meta.get("format") != _FORMAT or str(meta.get("version")) != str(_VERSION):
        raise _Damage(None, f"not an ocrr ledger v{_VERSION} file (meta format={meta.get('format')!r}, "
                            f"version={meta.get('version')!r})")
    dim, size, head = meta.get("dim"), meta.get("size"), meta.get("chain_head")
    if meta.get("durable") != 1 or type(size) is not int or not isinstance(head, bytes):
        raise _Damage(None, "meta table lacks the committed size and chain head (not a durable ledger file, "
                            "or meta edited); import it with `ocrr ledger import`")
    if size and (type(dim) is not int or not 0 < dim <= _MAX_DIM):
        raise _Damage(None, f"meta table has no valid dim ({dim!r}) but {size} committed entries")
    checkpoints = conn.execute("SELECT size, chain_head, root FROM checkpoints ORDER BY size").fetchall()
    trusted = 0
    if trust_until is not None and checkpoints:
        trusted = min(int(checkpoints[-1][0]), size)
    stored = {}  # (level, idx) -> hash, all of it: ~100 bytes per entry while scanning
    for level, idx, h in conn.execute("SELECT level, idx, hash FROM nodes"):
        stored[(level, idx)] = h
    tree = MerkleTree()
    labels, texts, hashes = [], [], []
    held = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    vectors = np.empty((min(size, held), dim if size else 0), _F4LE)
    prev = GENESIS
    i = 0
    rows = conn.execute("SELECT id, typeof(id), CAST(label AS BLOB), typeof(label), CAST(text AS BLOB), "
                        "typeof(text), vector, prev_hash, hash FROM entries ORDER BY id")
    while batch := rows.fetchmany(4096):
        for id_, t_id, lab, t_lab, txt, t_txt, vec, prev_hash, digest in batch:
            if i >= size:
                raise _Damage(size, f"the file holds more entries than its last commit ({size}): entry {i} "
                                    "was added outside the ledger")
            if t_id != "integer" or id_ != i:
                raise _Damage(i, f"entry {i}: id is {id_!r}, expected {i} (an entry was dropped, "
                                 "duplicated or moved)")
            if t_lab != "text" or t_txt not in ("text", "null"):
                raise _Damage(i, f"entry {i}: label or text is not stored as text")
            try:
                label = lab.decode("utf-8")
                text = None if txt is None else txt.decode("utf-8")
            except UnicodeDecodeError:
                raise _Damage(i, f"entry {i}: label or text is not valid UTF-8 (bytes edited)") from None
            if not isinstance(vec, bytes) or len(vec) != 4 * dim:
                raise _Damage(i, f"entry {i}: vector is not {4 * dim} bytes (dim {dim})")
            if prev_hash != prev:
                link = "the genesis value" if i == 0 else f"entry {i - 1}"
                raise _Damage(i, f"entry {i}: prev_hash does not link to {link}")
            if not isinstance(digest, bytes) or len(digest) != 32:
                raise _Damage(i, f"entry {i}: stored hash is not 32 bytes")
            if i >= trusted:
                pre = entry_bytes(i, label, text, vec, prev_hash)
                if hashlib.sha256(pre).digest() != digest:
                    raise _Damage(i, f"entry {i}: stored hash does not match its contents "
                                     "(label, text or vector changed)")
                leaf = hashlib.sha256(b"\x00" + pre).digest()
            else:
                leaf = stored.get((0, i))
                if not isinstance(leaf, bytes) or len(leaf) != 32:
                    raise _Damage(i, f"entry {i}: its Merkle leaf is missing from the nodes table")
            for level, k, h in tree.append(leaf):
                if stored.pop((level, k), None) != h:
                    lo = k << level
                    raise _Damage(lo, f"Merkle node (level {level}, index {k}) over entries {lo}.."
                                      f"{lo + (1 << level) - 1} is missing or does not match them")
            vectors[i] = np.frombuffer(vec, _F4LE)
            labels.append(label)
            texts.append(text)
            hashes.append(digest)
            prev = digest
            i += 1
            if i == trusted:
                _check_checkpoint(checkpoints[-1], tree, prev)
    if i < size:
        raise _Damage(i, f"the last commit recorded {size} entries but the file holds {i}: "
                         f"entries {i}..{size - 1} were removed")
    if head != prev:
        raise _Damage(size, "the chain head recorded at the last commit does not match the last entry")
    if stored:
        (level, k), _ = min(stored.items())
        raise _Damage(min(k << level, size), f"the nodes table holds a node (level {level}, index {k}) "
                                             "that no entry accounts for")
    for cp in checkpoints:
        _check_checkpoint(cp, tree, hashes[cp[0] - 1] if 0 < cp[0] <= len(hashes) else None)
    return _Scan(dim if type(dim) is int else None, labels, texts, vectors, hashes, tree)


def _check_checkpoint(cp: tuple, tree: MerkleTree, chain_head: bytes | None) -> None:
    cp_size, cp_head, cp_root = cp
    if type(cp_size) is not int or not 0 < cp_size <= len(tree) or chain_head is None:
        raise _Damage(min(len(tree), cp_size) if type(cp_size) is int else None,
                      f"checkpoint of size {cp_size!r} lies past the end of the log ({len(tree)} entries): "
                      "entries were removed")
    if cp_head != chain_head or cp_root != tree.root(cp_size):
        raise _Damage(cp_size - 1, f"checkpoint at size {cp_size} does not match the entries before it "
                                   "(history rewritten)")


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)  # explicit BEGIN/COMMIT
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # WAL fsync on every commit: acknowledged = on disk
    return conn


def scan_file(path: str | os.PathLike[str], verify: str = "full") -> tuple[LedgerReport, _Scan | None]:
    """Check a ledger file (read-only); return the report and, when intact, what it holds."""
    path = Path(path)
    if not path.is_file():
        raise OcrrError(f"ledger file {path} does not exist; check the path (create one with `ocrr ledger import` "
                        "or `ocrr serve --ledger`)")
    if verify not in ("full", "checkpoint"):
        raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
    try:
        conn = _connect(path, readonly=True)
        try:
            conn.execute("BEGIN")  # one snapshot, even while a writer appends
            return _report_of(conn, None if verify == "full" else 0)
        finally:
            conn.close()
    except sqlite3.Error as e:
        return LedgerReport(False, 0, None, f"not a readable SQLite ledger ({e})"), None


def _report_of(conn: sqlite3.Connection, trust_until: int | None) -> tuple[LedgerReport, _Scan | None]:
    try:
        scan = _scan(conn, trust_until)
    except _Damage as d:
        try:
            n = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        except sqlite3.Error:
            n = 0
        return LedgerReport(False, n, d.first_bad, d.reason), None
    except (sqlite3.Error, TypeError, ValueError) as e:  # tables dropped or columns of the wrong kind
        return LedgerReport(False, 0, None, f"the file's tables are damaged ({e})"), None
    n = len(scan.hashes)
    trusted = 0 if trust_until is None else _last_checkpoint(conn)
    return LedgerReport(True, n, None, f"ok: {n} entries, chain and Merkle tree intact",
                        _b64(scan.tree.root()), _b64(scan.hashes[-1] if n else GENESIS), trusted), scan


def _last_checkpoint(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT MAX(size) FROM checkpoints").fetchone()
    return int(row[0] or 0)


class _Pending:
    __slots__ = ("vecs", "labels", "texts", "ids", "error", "done")

    def __init__(self, vecs: np.ndarray, labels: list, texts: list):
        self.vecs, self.labels, self.texts = vecs, labels, texts
        self.ids: range | None = None
        self.error: BaseException | None = None
        self.done = False


class DurableLedger:
    """A ledger file that acknowledges appends only once they are on disk.

    ``DurableLedger.open(path)`` creates or opens the file, checks it and mirrors it in
    memory: ``memory`` is a plain ``Ledger`` unless ``apply`` is given, in which case
    ``apply`` receives the stored entries on open and every committed batch afterwards
    (the persistent substrate feeds its ledger and index this way). ``lock`` is held while
    the mirror changes; hold it to read the mirror consistently. Thread-safe.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection, scan: _Scan, report: LedgerReport,
                 apply: Apply | None):
        self.path, self._conn = path, conn
        self.dim: int | None = scan.dim
        self.tree = scan.tree
        self._hashes: list[bytes] = scan.hashes
        self.report = report
        self.lock = threading.RLock()
        self._cv = threading.Condition()
        self._queue: list[_Pending] = []
        self._committing = False
        self._closed = False
        self._broken: BaseException | None = None
        self.commits = 0  # transactions, for the group-commit figures
        self.memory: Ledger | None = None
        if apply is None:  # a plain Ledger mirror, built from the checked columns without rehashing
            n = len(scan.hashes)
            self.memory = Ledger._from_stored(self.dim, list(range(n)), scan.labels, scan.texts, scan.vectors,
                                              [GENESIS, *scan.hashes[:-1]][:n], scan.hashes)
            self._apply = self._apply_memory
        else:
            self._apply = apply
            if scan.hashes:
                try:
                    self._feed(scan.vectors, scan.labels, scan.texts)
                except BaseException:
                    conn.close()
                    raise

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], dim: int | None = None, verify: str = "full",
             apply: Apply | None = None) -> DurableLedger:
        """Open (creating if missing) and check a ledger file; refuse a broken one."""
        path = Path(path).expanduser()
        if verify not in ("full", "checkpoint"):
            raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise OcrrError(f"dim must be a positive integer, got {dim!r}")
        if not path.exists() and not path.parent.is_dir():
            raise OcrrError(f"cannot create ledger {path}: folder {path.parent} does not exist; create it first")
        try:
            conn = _connect(path)
            conn.execute("BEGIN IMMEDIATE")  # no other writer while we check the file
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                _schema(conn, dim)
            elif "meta" not in tables:
                conn.execute("ROLLBACK")
                conn.close()
                raise OcrrError(f"{path} is an SQLite file but not an ocrr ledger (no meta table); "
                                "pass another path")
            elif "nodes" not in tables:  # written by Ledger.save / Ledger.open: add the tree
                _adopt_v1(conn)
            report, scan = _report_of(conn, None if verify == "full" else 0)
            conn.execute("COMMIT" if report else "ROLLBACK")  # a damaged v1 file stays as it was
        except sqlite3.Error as e:
            raise OcrrError(f"cannot open ledger {path} ({e}); check that it is an ocrr ledger file and "
                            "that its folder is writable") from e
        if not report:
            conn.close()
            where = "" if report.first_bad is None else f" at entry {report.first_bad}"
            raise OcrrError(f"ledger {path} is damaged{where}: {report.reason}. Refusing to serve it; restore "
                            f"the file from a backup (run `ocrr ledger verify {path}` for the report)")
        if dim is not None and scan.dim is not None and dim != scan.dim:
            conn.close()
            raise OcrrError(f"ledger {path} holds vectors of dimension {scan.dim}, not {dim}; use another file")
        scan.dim = scan.dim or dim
        ledger = cls(path, conn, scan, report, apply)
        if verify == "full":
            ledger._record_checkpoint()
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
        with self.lock:
            size = len(self._hashes)
            return size, self.tree.root(size), self._hashes[size - 1] if size else GENESIS

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
        try:
            cur = conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries "
                               "WHERE id >= ? AND id < ? ORDER BY id", (lo, hi))
            while batch := cur.fetchmany(_BATCH // 16):
                yield from batch
        finally:
            conn.close()

    # -- appending ----------------------------------------------------------------------
    def append(self, vector, label: str, text: str | None = None) -> int:
        """Append one entry; return its id once it is on disk."""
        try:
            vec = np.asarray(vector, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise OcrrError(f"vector is not numeric ({e}); pass an array of floats") from e
        if vec.ndim != 1:
            raise OcrrError(f"append takes one vector of shape (d,), got shape {vec.shape}; use extend() for several")
        return self.extend(vec.reshape(1, -1), [label], [text])[0]

    def extend(self, vectors, labels: Sequence[str], texts: Sequence[str | None] | None = None) -> range:
        """Append entries atomically (all or none); return their ids once on disk."""
        vecs = _check_batch(vectors, labels, texts, self.dim)
        texts = list(texts) if texts is not None else [None] * len(labels)
        if not len(vecs):
            return range(len(self), len(self))
        item = _Pending(vecs, list(labels), texts)
        with self._cv:
            self._queue.append(item)
            while not item.done:
                if self._committing:
                    self._cv.wait()
                    continue
                if self._closed:
                    raise OcrrError(f"ledger {self.path} is closed; reopen it to append")
                # Leader: commit everything waiting now, as one transaction, outside the lock.
                self._committing, batch, self._queue = True, self._queue, []
                self._cv.release()
                try:
                    self._commit_all(batch)
                finally:
                    self._cv.acquire()
                    self._committing = False
                    self._cv.notify_all()
        if item.error is not None:
            raise item.error
        return item.ids

    def _commit_all(self, batch: list[_Pending]) -> None:
        """Commit a group; every item ends done, with its ids or an error (never left waiting)."""
        try:
            if self._broken is not None:
                raise self._broken
            self._commit(batch)
        except BaseException as e:
            err = e if isinstance(e, OcrrError) else OcrrError(f"ledger {self.path}: append failed ({e})")
            for p in batch:
                if not p.done:
                    p.error, p.done = err, True

    def _commit(self, batch: list[_Pending]) -> None:
        n0 = len(self._hashes)
        dim = batch[0].vecs.shape[1]
        if self.dim is not None:
            ok = [p for p in batch if p.vecs.shape[1] == self.dim]
        else:  # first append fixes the dimension
            ok = [p for p in batch if p.vecs.shape[1] == dim]
        for p in batch:
            if p not in ok:
                p.error, p.done = OcrrError(f"vectors have dimension {p.vecs.shape[1]}, the ledger holds "
                                            f"{self.dim or dim}; encode with the ledger's encoder"), True
        if not ok:
            return
        rows, nodes, digests = [], [], []
        prev = self.chain_head
        n = n0
        try:
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
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
                conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
                conn.executemany("UPDATE meta SET value = ? WHERE key = ?",
                                 [(n, "size"), (prev, "chain_head"), (self.dim or dim, "dim")])
                conn.execute("COMMIT")  # returns once the WAL is fsynced (synchronous=FULL)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except BaseException as e:
            self.tree.truncate(n0)
            err = e if isinstance(e, OcrrError) else OcrrError(
                f"could not write to ledger {self.path} ({e}); nothing was appended; check disk space and permissions")
            for p in ok:
                p.error, p.done = err, True
            return
        self.commits += 1
        self.dim = self.dim or dim
        with self.lock:  # the mirror follows the file
            self._hashes.extend(digests)
            vecs = np.concatenate([p.vecs for p in ok]) if len(ok) > 1 else ok[0].vecs
            labels = [x for p in ok for x in p.labels]
            texts = [x for p in ok for x in p.texts]
            try:
                self._feed(vecs, labels, texts)
            except BaseException as e:  # on disk but not in memory: refuse appends until reopened
                self._broken = OcrrError(f"ledger {self.path}: the in-memory copy could not take committed "
                                         f"entries ({e}); reopen the ledger")
                raise self._broken from e
        for p in ok:
            p.done = True

    def _feed(self, vecs: np.ndarray, labels: list, texts: list) -> None:
        if self._apply(vecs, labels, texts) != self.chain_head:  # same bytes in, same digests out
            raise OcrrError(f"ledger {self.path}: the in-memory chain does not match the file (was the "
                            "substrate opened with other settings than the ones that wrote it?)")

    def _apply_memory(self, vecs: np.ndarray, labels: list, texts: list) -> bytes:
        if self.memory.dim is None:
            self.memory = Ledger(vecs.shape[1])
        if len(labels) == 1:
            self.memory.append_checked(vecs[0], labels[0], texts[0])
        else:
            self.memory.extend(vecs, labels, texts)
        return self.memory.head

    # -- checking -----------------------------------------------------------------------
    def verify(self, verify: str = "full") -> LedgerReport:
        """Re-read and check the file as it is on disk now; record a checkpoint if intact."""
        report, _ = scan_file(self.path, verify)
        self.report = report
        if report and verify == "full":
            self._record_checkpoint(report.size)
        return report

    def _record_checkpoint(self, size: int | None = None) -> None:
        size = len(self) if size is None else size
        if size == 0:
            return
        with self._cv:  # between group commits, so the write does not interleave with one
            while self._committing:
                self._cv.wait()
            if self._closed:
                return
            self._conn.execute("INSERT OR IGNORE INTO checkpoints VALUES (?, ?, ?, ?)",
                               (size, self._hashes[size - 1], self.tree.root(size), time.time()))

    def close(self) -> None:
        """Wait for the commit in flight, then close the file. Idempotent."""
        with self._cv:
            while self._committing:
                self._cv.wait()
            if not self._closed:
                self._closed = True
                self._conn.close()
                self._cv.notify_all()

    def __enter__(self) -> DurableLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _check_batch(vectors, labels, texts, dim: int | None) -> np.ndarray:
    try:
        vecs = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise OcrrError(f"vectors are not numeric ({e}); pass an array of floats") from e
    if vecs.ndim != 2:
        raise OcrrError(f"vectors must have shape (m, d), got {vecs.shape}")
    if dim is not None and vecs.shape[1] != dim:
        raise OcrrError(f"vectors have dimension {vecs.shape[1]}, the ledger holds {dim}; "
                        "encode with the ledger's encoder")
    if vecs.shape[1] < 1:
        raise OcrrError("vectors must have at least one component")
    if not np.isfinite(vecs).all():
        raise OcrrError("a vector contains NaN or infinity; check the encoder output")
    if len(labels) != len(vecs) or (texts is not None and len(texts) != len(vecs)):
        raise OcrrError(f"got {len(vecs)} vectors but {len(labels)} labels"
                        + ("" if texts is None else f" and {len(texts)} texts") + "; pass one per vector")
    for label, text in zip(labels, texts if texts is not None else [None] * len(labels)):
        if not isinstance(label, str) or not label:
            raise OcrrError(f"label must be a non-empty string, got {label!r}")
        if text is not None and not isinstance(text, str):
            raise OcrrError(f"text must be a string or None, got {type(text).__name__}")
        try:
            label.encode("utf-8")
            text is None or text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise OcrrError(f"label or text is not valid Unicode ({e.reason}); remove lone surrogates") from None
    return np.ascontiguousarray(vecs)
