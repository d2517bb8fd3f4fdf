"""The ledger file: its tables, and the check that reads it back.

The one ledger file format (``Ledger.open``/``save`` and ``DurableLedger`` all write it;
docs/ledger.md describes it). An SQLite file with these tables:

* ``entries``: one row per entry, exactly as ``Ledger`` stores them;
* ``nodes``: every complete Merkle subtree hash (level, index, hash), leaves included;
* ``meta``: format, dim, and the size and chain head of the last commit;
* ``checkpoints``: (size, chain head, root, time, signed note) of every successful full
  verification by a ledger with a signing key (``ocrr.ledger.checkpoint_records``);
* ``verifications``: the latest outcomes of ``/verify`` asked of a service (kept, not checked).

``scan_file`` / ``_report_of`` read a file and check every entry (its id, link, stored
hash and Merkle leaf), every stored node, the last commit's size and head, and every
authenticated checkpoint, stopping at the first problem with a report that names the entry.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import struct
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.checkpoint_records import sort_records
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.rows import MAX_DIM
from ocrr.ledger.verify import ProofError, entry_bytes

__all__ = ["LedgerReport", "scan_file"]

_FORMAT, _VERSION = "ocrr-ledger", 1
_F4LE = np.dtype("<f4")


@dataclass(frozen=True)
class LedgerReport:
    """Outcome of checking a ledger file; truthy iff it is intact."""

    ok: bool
    size: int
    first_bad: int | None
    reason: str
    root: str | None = None  # base64, when ok (as in heads, proofs and checkpoints)
    chain_head: str | None = None
    checked_from: int = 0  # entries before this were vouched for by an authenticated checkpoint
    ignored_checkpoints: int = 0  # checkpoint records not authenticated (and so not used)
    ignored_why: tuple[str, ...] = ()  # why, for the first few

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict:
        return {**asdict(self), "ignored_why": list(self.ignored_why)}  # as JSON gives it back


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
    checked_from: int = 0  # entries before it were not rehashed: an authenticated checkpoint vouched for them
    ignored_checkpoints: int = 0
    ignored_why: tuple[str, ...] = ()


# Outcomes of verifications asked of a running service (kept, not checked: they vouch for nothing).
VERIFICATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS verifications (id INTEGER PRIMARY KEY, time REAL NOT NULL, report TEXT NOT NULL)"
)
_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
    "CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY, label TEXT NOT NULL, text TEXT, "
    "vector BLOB NOT NULL, prev_hash BLOB NOT NULL, hash BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL, hash BLOB NOT NULL, "
    "PRIMARY KEY (level, idx)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, chain_head BLOB NOT NULL, "
    "root BLOB NOT NULL, time REAL NOT NULL, note TEXT)",
    VERIFICATIONS_TABLE,
)


def _schema(conn: sqlite3.Connection, dim: int | None) -> None:
    """Create the tables inside the caller's transaction (executescript would commit it)."""
    for statement in _TABLES:
        conn.execute(statement)
    conn.executemany(
        "INSERT OR IGNORE INTO meta VALUES (?, ?)",
        [
            ("format", _FORMAT),
            ("version", _VERSION),
            ("dim", dim),
            ("size", 0),
            ("chain_head", GENESIS),
            ("durable", 1),
        ],
    )


def add_note_column(conn: sqlite3.Connection) -> None:
    """Give the checkpoints table of a file from before signed checkpoint records its ``note``
    column, inside the caller's transaction (its rows keep a NULL note: unauthenticated)."""
    if not _has_note_column(conn):
        conn.execute("ALTER TABLE checkpoints ADD COLUMN note TEXT")


def _has_note_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "note" for row in conn.execute("PRAGMA table_info(checkpoints)"))


def _adopt_v1(conn: sqlite3.Connection) -> None:
    """Convert a file of the old format (tables ``meta`` and ``entries`` only, written by the
    old ``Ledger.save`` / ``Ledger.open``) in place, inside the caller's transaction: add the
    other tables, the Merkle nodes and the commit record. Leaves come from the stored fields,
    so the scan that follows still compares every entry with its stored hash and link; the
    caller rolls back if it fails."""
    for statement in _TABLES:
        conn.execute(statement)
    _add_tree(conn, conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id"))


def _add_tree(conn: sqlite3.Connection, rows: Iterable[tuple]) -> None:
    """Store the Merkle nodes over ``rows`` (the entries table's rows, in id order) and the
    commit record (size, chain head), inside the caller's transaction."""
    tree, nodes, last, n = MerkleTree(), [], GENESIS, 0
    for id_, label, text, vec, prev, digest in rows:
        try:
            pre = entry_bytes(id_, label, text, vec, prev)
        except (TypeError, AttributeError, ProofError, struct.error):
            pre = b""  # a malformed row: the scan names it
        nodes.extend(tree.append(hashlib.sha256(b"\x00" + pre).digest()))
        last, n = digest, n + 1
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)", nodes)
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [("size", n), ("chain_head", last), ("durable", 1)])


def _scan(conn: sqlite3.Connection, trust_until: int | None, vkeys: Sequence[str] = ()) -> _Scan:
    """Read and check every entry; raise _Damage at the first problem.

    ``trust_until`` not None: entries before the last authenticated checkpoint (its note
    signed by one of ``vkeys``) are not rehashed: their stored leaves build the tree, and
    the checkpoint's root and chain head must match it. ``None`` trusts nothing (a full
    check). Every authenticated checkpoint must match the entries; other rows are ignored."""
    meta = {k: v for k, v in conn.execute("SELECT key, value FROM meta")}
    if meta.get("format") != _FORMAT or str(meta.get("version")) != str(_VERSION):
        raise _Damage(
            None,
            f"not an ocrr ledger v{_VERSION} file (meta format={meta.get('format')!r}, "
            f"version={meta.get('version')!r})",
        )
    dim, size, head = meta.get("dim"), meta.get("size"), meta.get("chain_head")
    if "durable" not in meta and "size" not in meta:
        raise _Damage(
            None,
            "the file is in the old ledger format (no commit record or Merkle tree); open it once with "
            "Ledger.open(path), which checks and converts it in place, or run `ocrr ledger migrate OLD NEW`",
        )
    if meta.get("durable") != 1 or type(size) is not int or not isinstance(head, bytes):
        raise _Damage(
            None,
            "meta table lacks the committed size and chain head (not a durable ledger file, "
            "or meta edited); import it with `ocrr ledger import`",
        )
    if not size:
        width = 0  # no entries: the dim may be unset
    elif type(dim) is int and 0 < dim <= MAX_DIM:
        width = dim
    else:
        raise _Damage(None, f"meta table has no valid dim ({dim!r}) but {size} committed entries")
    note = "note" if _has_note_column(conn) else "NULL"  # a file from before signed records, opened read-only
    records = sort_records(conn.execute(f"SELECT size, chain_head, root, {note} FROM checkpoints"), vkeys)
    checkpoints = records.authenticated
    trusted = 0
    if trust_until is not None and checkpoints:
        trusted = min(checkpoints[-1][0], size)
    stored = {}  # (level, idx) -> hash, all of it: ~100 bytes per entry while scanning
    for level, idx, h in conn.execute("SELECT level, idx, hash FROM nodes"):
        stored[(level, idx)] = h
    tree = MerkleTree()
    labels, texts, hashes = [], [], []
    held = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    rows = max(0, min(size, held))
    # Bounded by what is held: the vectors of a valid file are in the file, so a dim claiming
    # more than its bytes is refused (naming the first entry of another width) before allocating.
    file_bytes = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    if rows * width * _F4LE.itemsize > file_bytes:
        wrong = conn.execute(
            "SELECT id FROM entries WHERE length(vector) != ? ORDER BY id LIMIT 1", (width * _F4LE.itemsize,)
        ).fetchone()
        raise _Damage(
            None if wrong is None else wrong[0],
            f"the meta table's dim {dim} would need {rows * width * _F4LE.itemsize} bytes of vectors for {rows} "
            f"entries, more than the file's {file_bytes} bytes (dim edited)",
        )
    vectors = np.empty((rows, width), _F4LE)
    prev = GENESIS
    i = 0
    rows = conn.execute(
        "SELECT id, typeof(id), CAST(label AS BLOB), typeof(label), CAST(text AS BLOB), "
        "typeof(text), CAST(vector AS BLOB), typeof(vector), prev_hash, hash FROM entries ORDER BY id"
    )
    while batch := rows.fetchmany(4096):
        for id_, t_id, lab, t_lab, txt, t_txt, vec, t_vec, prev_hash, digest in batch:
            if i >= size:
                raise _Damage(
                    size,
                    f"the file holds more entries than its last commit ({size}): entry {i} "
                    "was added outside the ledger",
                )
            if t_id != "integer" or id_ != i:
                raise _Damage(i, f"entry {i}: id is {id_!r}, expected {i} (an entry was dropped, duplicated or moved)")
            if t_lab != "text" or t_txt not in ("text", "null"):
                raise _Damage(i, f"entry {i}: label or text is not stored as text")
            if t_vec != "blob":
                raise _Damage(i, f"entry {i}: vector is stored as {t_vec}, not as bytes (edited)")
            try:
                label = lab.decode("utf-8")
                text = None if txt is None else txt.decode("utf-8")
            except UnicodeDecodeError:
                raise _Damage(i, f"entry {i}: label or text is not valid UTF-8 (bytes edited)") from None
            leaf = check_entry(i, label, text, vec, prev_hash, digest, prev, width, rehash=i >= trusted)
            if leaf is None:
                leaf = stored.get((0, i))
                if not isinstance(leaf, bytes) or len(leaf) != 32:
                    raise _Damage(i, f"entry {i}: its Merkle leaf is missing from the nodes table")
            for level, k, h in tree.append(leaf):
                if stored.pop((level, k), None) != h:
                    lo = k << level
                    raise _Damage(
                        lo,
                        f"Merkle node (level {level}, index {k}) over entries {lo}.."
                        f"{lo + (1 << level) - 1} is missing or does not match them",
                    )
            vectors[i] = np.frombuffer(vec, _F4LE)
            labels.append(label)
            texts.append(text)
            hashes.append(digest)
            prev = digest
            i += 1
            if i == trusted:
                _check_checkpoint(checkpoints[-1], tree, prev)
    if i < size:
        raise _Damage(
            i, f"the last commit recorded {size} entries but the file holds {i}: entries {i}..{size - 1} were removed"
        )
    if head != prev:
        raise _Damage(size, "the chain head recorded at the last commit does not match the last entry")
    if stored:
        (level, k), _ = min(stored.items())
        raise _Damage(
            min(k << level, size), f"the nodes table holds a node (level {level}, index {k}) that no entry accounts for"
        )
    for cp in checkpoints:
        _check_checkpoint(cp, tree, hashes[cp[0] - 1] if 0 < cp[0] <= len(hashes) else None)
    return _Scan(
        dim if type(dim) is int else None,
        labels,
        texts,
        vectors,
        hashes,
        tree,
        trusted,
        records.ignored,
        records.reasons,
    )


def check_entry(
    i: int, label: str, text: str | None, vec, prev_hash, digest, prev: bytes, dim: int, rehash: bool = True
) -> bytes | None:
    """Raise _Damage unless stored entry ``i`` links to ``prev`` and (``rehash``) its stored
    hash matches its contents; return its Merkle leaf hash (None when not rehashed). The
    check of an opened file and of entries another process appended to it."""
    if not isinstance(vec, bytes) or len(vec) != 4 * dim:
        raise _Damage(i, f"entry {i}: vector is not {4 * dim} bytes (dim {dim})")
    if prev_hash != prev:
        link = "the genesis value" if i == 0 else f"entry {i - 1}"
        raise _Damage(i, f"entry {i}: prev_hash does not link to {link}")
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise _Damage(i, f"entry {i}: stored hash is not 32 bytes")
    if not rehash:
        return None
    pre = entry_bytes(i, label, text, vec, prev_hash)
    if hashlib.sha256(pre).digest() != digest:
        raise _Damage(i, f"entry {i}: stored hash does not match its contents (label, text or vector changed)")
    return hashlib.sha256(b"\x00" + pre).digest()


def _check_checkpoint(cp: tuple, tree: MerkleTree, chain_head: bytes | None) -> None:
    cp_size, cp_head, cp_root = cp
    if type(cp_size) is not int or not 0 < cp_size <= len(tree) or chain_head is None:
        raise _Damage(
            min(len(tree), cp_size) if type(cp_size) is int else None,
            f"checkpoint of size {cp_size!r} lies past the end of the log ({len(tree)} entries): entries were removed",
        )
    if cp_head != chain_head or cp_root != tree.root(cp_size):
        raise _Damage(
            cp_size - 1, f"checkpoint at size {cp_size} does not match the entries before it (history rewritten)"
        )


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)  # explicit BEGIN/COMMIT
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")  # WAL fsync on every commit: acknowledged = on disk
        except sqlite3.Error:
            conn.close()  # (not a database, or not writable): the caller says so; the file stays closed
            raise
    return conn


def scan_file(
    path: str | os.PathLike[str], verify: str = "full", vkeys: Sequence[str] = ()
) -> tuple[LedgerReport, _Scan | None]:
    """Check a ledger file (read-only); return the report and, when intact, what it holds.
    ``vkeys``: the verifier keys whose checkpoint records are trusted (none: no record is,
    and ``verify="checkpoint"`` rehashes every entry)."""
    path = Path(path)
    if not path.is_file():
        raise OcrrError(
            f"ledger file {path} does not exist; check the path (create one with `ocrr ledger import` "
            "or `ocrr serve --ledger`)"
        )
    if verify not in ("full", "checkpoint"):
        raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
    try:
        conn = _connect(path, readonly=True)
        try:
            conn.execute("BEGIN")  # one snapshot, even while a writer appends
            return _report_of(conn, None if verify == "full" else 0, vkeys)
        finally:
            conn.close()
    except sqlite3.Error as e:
        return LedgerReport(False, 0, None, f"not a readable SQLite ledger ({e})"), None


def _report_of(
    conn: sqlite3.Connection, trust_until: int | None, vkeys: Sequence[str] = ()
) -> tuple[LedgerReport, _Scan | None]:
    try:
        scan = _scan(conn, trust_until, vkeys)
    except _Damage as d:
        try:
            n = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        except sqlite3.Error:
            n = 0
        return LedgerReport(False, n, d.first_bad, d.reason), None
    except (sqlite3.Error, TypeError, ValueError) as e:  # tables dropped or columns of the wrong kind
        return LedgerReport(False, 0, None, f"the file's tables are damaged ({e})"), None
    return ok_report(scan), scan


def ok_report(scan: _Scan) -> LedgerReport:
    """The report of a ledger whose every entry checked out (any store)."""
    n = len(scan.hashes)
    return LedgerReport(
        True,
        n,
        None,
        f"ok: {n} entries, chain and Merkle tree intact",
        _b64(scan.tree.root()),
        _b64(scan.hashes[-1] if n else GENESIS),
        min(scan.checked_from, n),
        scan.ignored_checkpoints,
        scan.ignored_why,
    )


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")
