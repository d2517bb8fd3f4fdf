"""The ledger file's check: read it back and judge it.

The one ledger file format (``Ledger.open``/``save`` and ``DurableLedger`` all write it;
its tables: ``ocrr.ledger.sqlite.schema``). ``scan_file`` / ``report_of`` read a file and
check every entry (its id, link, stored hash and Merkle leaf), every stored node, the last
commit's size and head, and every authenticated checkpoint, stopping at the first problem
with a report that names the entry (the rules: ``ocrr.ledger.scan``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.checkpoint_records import sort_records
from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.rows import MAX_DIM, check_memory
from ocrr.ledger.scan import Damage, LedgerReport, Scan, check_checkpoint, check_entry, ok_report
from ocrr.ledger.sqlite.nodes_in_order import NodesInOrder
from ocrr.ledger.sqlite.prefix import trusted_prefix
from ocrr.ledger.sqlite.schema import FORMAT, VERSION, connect, has_note_column
from ocrr.utils.grow_ahead import room_at_open

__all__ = ["KnownPrefix", "LedgerReport", "report_of", "rows_to_read", "scan_file"]

_F4LE = np.dtype("<f4")
_ROWS_PER_FETCH = 1024  # entries read one by one are fetched this many at a time (two batches live at once)


@dataclass
class KnownPrefix:
    """The first ``size`` entries of a ledger file as a process that read and checked them hands
    them on (``ocrr serve``'s supervisor to its workers: ``ocrr.service.shared_rows``): an open
    given one reads from the file only the entries after them, once the file's entry
    ``size - 1`` still has the chain hash given here (else it reads the file as without one).
    ``vectors``: a writable (capacity, dim) float32 buffer whose first ``size`` rows are the
    entries' (the scan writes later entries' rows after them while they fit); ``tree`` holds
    their leaves; the columns (``ocrr.ledger.columns``, their prefix maybe the supplier's
    read-only memory) are handed over, not copied: the scan appends later entries to them.
    With ``size`` 0 it gives only that buffer: the one the scan reads every row into, while
    they fit. ``rows_fd``: a memory file that ``vectors`` maps (shared) from its start; the
    column-wise reading writes its rows there with ``pwrite`` (``ocrr.ledger.sqlite.prefix``).
    ``inner_nodes_later`` (with ``size`` 0): the column-wise reading of the entries under the
    checkpoint leaves their stored inner Merkle nodes unread; the holder compares them after
    the open (``ocrr.ledger.sqlite.inner_nodes``), as it rehashes those entries."""

    size: int
    vectors: np.ndarray
    labels: LabelColumn
    texts: TextColumn
    hashes: HashColumn
    tree: MerkleTree
    rows_fd: int | None = None
    inner_nodes_later: bool = False


def _scan(
    conn: sqlite3.Connection,
    trust_until: int | None,
    vkeys: Sequence[str] = (),
    fast: bool = True,
    keep_rows: bool = True,
    known: KnownPrefix | None = None,
) -> Scan:
    """Read and check every entry; raise Damage at the first problem.

    ``trust_until`` not None: entries before the last authenticated checkpoint (its note
    signed by one of ``vkeys``) are not rehashed: their stored leaves build the tree, and
    the checkpoint's root and chain head must match it. ``None`` trusts nothing (a full
    check). Every authenticated checkpoint must match the entries; other rows are ignored.
    ``known``: the first entries, read and checked by the caller's supplier (``KnownPrefix``).
    ``fast``: read the entries before that checkpoint column-wise (``ocrr.ledger.sqlite.prefix``).
    ``keep_rows`` False: the same checks, but the Scan holds no vectors, labels or texts (a
    check whose caller wants only the report: at a million entries they are gigabytes)."""
    meta = {k: v for k, v in conn.execute("SELECT key, value FROM meta")}
    if meta.get("format") != FORMAT or str(meta.get("version")) != str(VERSION):
        raise Damage(
            None,
            f"not an ocrr ledger v{VERSION} file (meta format={meta.get('format')!r}, version={meta.get('version')!r})",
        )
    dim, size, head = meta.get("dim"), meta.get("size"), meta.get("chain_head")
    if "durable" not in meta and "size" not in meta:
        raise Damage(
            None,
            "the file is in the old ledger format (no commit record or Merkle tree); open it once with "
            "Ledger.open(path), which checks and converts it in place, or run `ocrr ledger migrate OLD NEW`",
        )
    if meta.get("durable") != 1 or type(size) is not int or not isinstance(head, bytes):
        raise Damage(
            None,
            "meta table lacks the committed size and chain head (not a durable ledger file, "
            "or meta edited); import it with `ocrr ledger import`",
        )
    if not size:
        width = 0  # no entries: the dim may be unset
    elif type(dim) is int and 0 < dim <= MAX_DIM:
        width = dim
    else:
        raise Damage(None, f"meta table has no valid dim ({dim!r}) but {size} committed entries")
    note = "note" if has_note_column(conn) else "NULL"  # a file from before signed records, opened read-only
    records = sort_records(conn.execute(f"SELECT size, chain_head, root, {note} FROM checkpoints"), vkeys)
    checkpoints = records.authenticated
    trusted = 0
    if trust_until is not None and checkpoints:
        trusted = min(checkpoints[-1][0], size)
    # The rows to make room for: at most the committed size and what is held (``_held_at_most``,
    # counted exactly only when that bound is too big for the file's bytes).
    rows = max(0, min(size, _held_at_most(conn)))
    # Bounded by what is held: the vectors of a valid file are in the file, so a dim claiming
    # more than its bytes is refused (naming the first entry of another width) before allocating.
    file_bytes = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
    if rows * width * _F4LE.itemsize > file_bytes:
        rows = max(0, min(size, conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]))
    if rows * width * _F4LE.itemsize > file_bytes:
        wrong = conn.execute(
            "SELECT id FROM entries WHERE length(vector) != ? ORDER BY id LIMIT 1", (width * _F4LE.itemsize,)
        ).fetchone()
        raise Damage(
            None if wrong is None else wrong[0],
            f"the meta table's dim {dim} would need {rows * width * _F4LE.itemsize} bytes of vectors for {rows} "
            f"entries, more than the file's {file_bytes} bytes (dim edited)",
        )
    labels: LabelColumn
    texts: TextColumn
    hashes: HashColumn
    rehash_from = trusted  # the entries a checkpoint vouches for are not rehashed here
    rows_checked = 0  # the rows before it obey the rows' rules (checked by the column-wise reading)
    if known is not None and keep_rows and _still_stored(conn, known, size, width):
        vectors = _room_for(known.vectors, known.size, rows)
        tree, labels, texts, hashes = known.tree, known.labels, known.texts, known.hashes
        prev, i = hashes[-1], known.size
        # Past the prefix its holder checked (and rehashes, if it took some on trust), every
        # entry is rehashed: no one else would rehash what this open takes in, even under a
        # checkpoint signed since.
        rehash_from = i
        rows_checked = i  # (their holder checked their rows' rules too)
        if i == trusted:
            check_checkpoint(checkpoints[-1], tree, prev)
    else:
        rows_fd, inner_nodes = None, not (known is not None and known.inner_nodes_later)
        if known is not None and keep_rows and not known.size and known.vectors.shape[1] == width:
            vectors = _room_for(known.vectors, 0, rows)  # the buffer the caller gave for the rows
            if vectors.ctypes.data == known.vectors.ctypes.data:  # (not a larger one made instead)
                rows_fd = known.rows_fd
        else:
            if keep_rows:
                check_memory(rows, width)
            vectors = _row_buffer(rows if keep_rows else 0, width)
        # The entries a checkpoint vouches for, read column-wise when they are intact (anything
        # unexpected there: read them again one by one below, which names what is wrong).
        prefix = (
            trusted_prefix(conn, trusted, width, vectors if keep_rows else None, rows_fd, inner_nodes)
            if fast and trusted
            else None
        )
        if prefix is None:
            tree, labels, texts, hashes, prev, i = MerkleTree(), LabelColumn(), TextColumn(), HashColumn(), GENESIS, 0
        else:
            tree, labels, texts, hashes, rows_obey = prefix
            rows_checked = trusted if rows_obey else 0
            prev, i = hashes[-1], trusted
            check_checkpoint(checkpoints[-1], tree, prev)
    stored = NodesInOrder(conn, i)  # every stored node the one-by-one reading adds, read as it adds them
    entries = conn.execute(
        "SELECT id, typeof(id), CAST(label AS BLOB), typeof(label), CAST(text AS BLOB), "
        "typeof(text), CAST(vector AS BLOB), typeof(vector), prev_hash, hash FROM entries WHERE id >= ? ORDER BY id",
        (i,),
    )
    while batch := entries.fetchmany(_ROWS_PER_FETCH):
        for id_, t_id, lab, t_lab, txt, t_txt, vec, t_vec, prev_hash, digest in batch:
            if i >= size:
                raise Damage(
                    size,
                    f"the file holds more entries than its last commit ({size}): entry {i} "
                    "was added outside the ledger",
                )
            if t_id != "integer" or id_ != i:
                raise Damage(i, f"entry {i}: id is {id_!r}, expected {i} (an entry was dropped, duplicated or moved)")
            if t_lab != "text" or t_txt not in ("text", "null"):
                raise Damage(i, f"entry {i}: label or text is not stored as text")
            if t_vec != "blob":
                raise Damage(i, f"entry {i}: vector is stored as {t_vec}, not as bytes (edited)")
            try:
                label = lab.decode("utf-8")
                text = None if txt is None else txt.decode("utf-8")
            except UnicodeDecodeError:
                raise Damage(i, f"entry {i}: label or text is not valid UTF-8 (bytes edited)") from None
            leaf = check_entry(i, label, text, vec, prev_hash, digest, prev, width, rehash=i >= rehash_from)
            if leaf is None:
                stored_leaf = stored.at(0, i)
                if not isinstance(stored_leaf, bytes) or len(stored_leaf) != 32:
                    raise Damage(i, f"entry {i}: its Merkle leaf is missing from the nodes table")
                leaf = stored_leaf
            for level, k, h in tree.append(leaf):
                if stored.at(level, k) != h:
                    lo = k << level
                    raise Damage(
                        lo,
                        f"Merkle node (level {level}, index {k}) over entries {lo}.."
                        f"{lo + (1 << level) - 1} is missing or does not match them",
                    )
            if keep_rows:
                vectors[i] = np.frombuffer(vec, _F4LE)
                labels.append(label)
                texts.append(text)
            hashes.append(digest)
            prev = digest
            i += 1
            if i == trusted:
                check_checkpoint(checkpoints[-1], tree, prev)
    if i < size:
        raise Damage(
            i, f"the last commit recorded {size} entries but the file holds {i}: entries {i}..{size - 1} were removed"
        )
    if head != prev:
        raise Damage(size, "the chain head recorded at the last commit does not match the last entry")
    extra = stored.extra()
    if extra is not None:
        at_level, at_idx = extra
        raise Damage(
            min(at_idx << at_level, size),
            f"the nodes table holds a node (level {at_level}, index {at_idx}) that no entry accounts for",
        )
    for cp in checkpoints:
        check_checkpoint(cp, tree, hashes[cp[0] - 1] if 0 < cp[0] <= len(hashes) else None)
    return Scan(
        dim if type(dim) is int else None,
        labels,
        texts,
        vectors,
        hashes,
        tree,
        rehash_from,
        records.ignored,
        records.reasons,
        rows_checked,
    )


def _held_at_most(conn: sqlite3.Connection) -> int:
    """At least as many as the entries the file holds, and as many when their ids are 0, 1, ...
    (a valid file's): one more than the largest id while none is negative (ids are distinct
    integers), read from the ends of the table; else the count, which reads all of it. Only a
    damaged file holds fewer, and the reading reports it whatever room was made."""
    # (two statements: SQLite finds a lone min() or max() at the table's end, both at once by a scan)
    (lowest,), (highest,) = (conn.execute(f"SELECT {end}(id) FROM entries").fetchone() for end in ("min", "max"))
    if lowest is None:
        return 0
    if lowest >= 0:
        return int(highest) + 1
    return int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])


def rows_to_read(path: Path) -> tuple[int, int] | None:
    """(dim, rows): the room an open of ``path`` needs for the rows it reads, from the meta
    table's dim and the ends of the entries table (``_held_at_most``), bounded by the file's
    bytes; None when the file does not say (missing, not a ledger, no valid dim). Only a size to
    make room with: the open checks everything it reads, and rows that do not fit go elsewhere."""
    if not path.is_file():
        return None
    try:
        conn = connect(path, readonly=True)
    except sqlite3.Error:
        return None
    try:
        dim = dict(conn.execute("SELECT key, value FROM meta")).get("dim")
        if type(dim) is not int or not 0 < dim <= MAX_DIM:
            return None
        file_bytes = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
        return dim, max(0, min(_held_at_most(conn), file_bytes // (dim * _F4LE.itemsize)))
    except (sqlite3.Error, TypeError, ValueError):
        return None
    finally:
        conn.close()


def _still_stored(conn: sqlite3.Connection, known: KnownPrefix, size: int, width: int) -> bool:
    """Whether the file still holds ``known``'s entries as its supplier read them: as many or
    more committed, of the same width, and its entry ``known.size - 1`` with the same chain
    hash and Merkle leaf (each links to the one before, so the prefix is the one read). Any
    other file is read as without ``known``, which names what changed."""
    n = known.size
    if not 0 < n <= size or known.vectors.shape[1] != width or len(known.hashes) != n or len(known.tree) != n:
        return False
    last = conn.execute("SELECT hash FROM entries WHERE id = ?", (n - 1,)).fetchone()
    leaf = conn.execute("SELECT hash FROM nodes WHERE level = 0 AND idx = ?", (n - 1,)).fetchone()
    if last is None or leaf is None:
        return False
    return bool(last[0] == known.hashes[-1] and leaf[0] == known.tree.node(0, n - 1))


def _room_for(buffer: np.ndarray, filled: int, rows: int) -> np.ndarray:
    """``buffer``'s first ``rows`` rows when it holds that many (its rows from ``filled`` on are
    the scan's to write); else a new buffer (with room to grow) holding its ``filled`` rows."""
    if rows <= len(buffer):
        return buffer[:rows]
    grown = _row_buffer(rows, buffer.shape[1])
    grown[:filled] = buffer[:filled]
    return grown


def _row_buffer(rows: int, width: int) -> np.ndarray:
    """An uninitialised (rows, width) float32 array whose buffer has room to grow: a substrate
    opened on the scan adopts it as its vector buffer (no copy). Its capacity leaves a quarter
    of it free (``ocrr.utils.grow_ahead.room_at_open``), so that a buffer grown ahead is not
    made, and filled, as soon as the file is opened."""
    return np.empty((room_at_open(rows, 64), width), _F4LE)[:rows]  # at least the 64 rows a new Chain starts with


def scan_file(
    path: str | os.PathLike[str], verify: str = "full", vkeys: Sequence[str] = (), rows: bool = True
) -> tuple[LedgerReport, Scan | None]:
    """Check a ledger file (read-only); return the report and, when intact, what it holds.
    ``vkeys``: the verifier keys whose checkpoint records are trusted (none: no record is,
    and ``verify="checkpoint"`` rehashes every entry). ``rows`` False: the Scan holds no
    vectors, labels or texts (for a caller that wants the report)."""
    path = Path(path)
    if not path.is_file():
        raise OcrrError(
            f"ledger file {path} does not exist; check the path (create one with `ocrr ledger import` "
            "or `ocrr serve --ledger`)"
        )
    if verify not in ("full", "checkpoint"):
        raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
    try:
        conn = connect(path, readonly=True)
        try:
            _require_sqlite(conn, path)
            conn.execute("BEGIN")  # one snapshot, even while a writer appends
            return report_of(conn, None if verify == "full" else 0, vkeys, rows)
        finally:
            conn.close()
    except sqlite3.Error as e:
        if getattr(e, "sqlite_errorcode", None) == _SQLITE_READONLY_ROLLBACK:
            raise OcrrError(
                f"{path}-journal is a rollback journal a killed writer left, and a read-only check cannot "
                "roll it back; open the ledger once with a writer (`ocrr serve --ledger`), then check again"
            ) from None
        return LedgerReport(False, 0, None, f"not a readable SQLite ledger ({e})"), None


_SQLITE_READONLY_ROLLBACK = 776  # a hot rollback journal that a read-only connection cannot replay


_SQLITE_NOTADB = 26  # SQLite's result code for a file that is no database


def _require_sqlite(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse a file that is no SQLite database at all (a CSV passed by mistake) as what it is,
    not as a damaged ledger. Asked of SQLite, not read with open(): closing a descriptor of
    the file would drop every POSIX lock this process's SQLite connections hold on it."""
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as e:
        if getattr(e, "sqlite_errorcode", None) != _SQLITE_NOTADB:
            raise
        raise OcrrError(
            f"{path} is not an ocrr ledger: it is not an SQLite file. Pass the file `ocrr serve --ledger` or "
            "`ocrr ledger import` wrote; if this was one, its first bytes are destroyed: restore it from a backup"
        ) from None


def report_of(
    conn: sqlite3.Connection,
    trust_until: int | None,
    vkeys: Sequence[str] = (),
    rows: bool = True,
    known: KnownPrefix | None = None,
) -> tuple[LedgerReport, Scan | None]:
    """Check the file open on ``conn`` inside the caller's transaction: the report and, when
    intact, what it holds (``trust_until``, ``vkeys`` and ``known`` as ``_scan``; ``rows`` as
    ``scan_file``)."""
    try:
        scan = _scan(conn, trust_until, vkeys, keep_rows=rows, known=known)
    except Damage as d:
        try:
            n = conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        except sqlite3.Error:
            n = 0
        return LedgerReport(False, n, d.first_bad, d.reason), None
    except (sqlite3.Error, TypeError, ValueError) as e:  # tables dropped or columns of the wrong kind
        return LedgerReport(False, 0, None, f"the file's tables are damaged ({e})"), None
    return ok_report(scan), scan
