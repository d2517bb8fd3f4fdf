"""Reading a PostgreSQL ledger back and checking it, as ``ocrr.ledger.sqlite.scan`` does for a file.

Every entry's id (gap-free from 0), link, stored hash and stored Merkle leaf; the head row's
size, chain head and root; every authenticated checkpoint (``ocrr.ledger.checkpoint_records``).
The first problem stops the scan with a report that names the entry
(``LedgerReport.first_bad``), the same report a file gives (``ocrr.ledger.scan``: the rules).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ocrr.ledger.chain import GENESIS
from ocrr.ledger.checkpoint_records import sort_records
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.postgres.schema import FORMAT, VERSION, has_note_column
from ocrr.ledger.rows import MAX_DIM, check_memory
from ocrr.ledger.scan import Damage, LedgerReport, Scan, check_checkpoint, check_stored_rows, ok_report

__all__ = ["ROW_COLUMNS", "report_of"]

_F4LE = np.dtype("<f4")
_FETCH = 4096
ROW_COLUMNS = "seq, label, text, vector, prev_hash, hash, leaf"


def _scan(conn, trust_until: int | None, vkeys: Sequence[str] = ()) -> Scan:
    """Read and check the whole ledger inside the caller's (snapshot) transaction; entries
    before the last checkpoint authenticated by one of ``vkeys`` are not rehashed when
    ``trust_until`` is not None (as the file's scan)."""
    head = conn.execute("SELECT format, version, dim, size, chain_head, root FROM ocrr_head").fetchone()
    if head is None:
        raise Damage(None, "the ocrr_head row is missing (deleted outside the ledger)")
    fmt, version, dim, size, chain_head, root = head
    if fmt != FORMAT or version != VERSION:
        raise Damage(None, f"not an ocrr ledger v{VERSION} (head says format={fmt!r}, version={version!r})")
    if type(size) is not int or size < 0:
        raise Damage(None, f"the head row's size {size!r} is not a number of entries (edited)")
    if size and not (type(dim) is int and 0 < dim <= MAX_DIM):
        raise Damage(None, f"the head row has no valid dim ({dim!r}) but {size} committed entries")
    note = "note" if has_note_column(conn) else "NULL"  # tables from before signed records (a reader role)
    records = sort_records(conn.execute(f"SELECT size, chain_head, root, {note} FROM ocrr_checkpoints"), vkeys)
    checkpoints = records.authenticated
    trusted = min(checkpoints[-1][0], size) if trust_until is not None and checkpoints else 0
    width = dim or 0
    tree = MerkleTree()
    labels: list = []
    texts: list = []
    hashes: list = []
    held = _held_rows(conn, size, width)
    check_memory(held, width)
    vectors = np.empty((held, width), _F4LE)
    prev = GENESIS
    with conn.cursor(name="ocrr_scan") as cur:  # server-side: rows arrive in batches, not all at once
        cur.itersize = _FETCH
        cur.execute(f"SELECT {ROW_COLUMNS} FROM ocrr_entries ORDER BY seq")
        for label, text, vec, prev, leaf in check_stored_rows(cur, 0, GENESIS, width, trusted):
            tree.append(leaf)
            i = len(hashes)
            if i >= size:
                raise Damage(
                    size,
                    f"the database holds more entries than its head ({size}): entry {i} was added outside the ledger",
                )
            vectors[i] = np.frombuffer(vec, _F4LE)
            labels.append(label)
            texts.append(text)
            hashes.append(prev)
            if i + 1 == trusted:
                check_checkpoint(checkpoints[-1], tree, prev)
    n = len(hashes)
    if n < size:
        raise Damage(
            n, f"the head records {size} entries but the database holds {n}: entries {n}..{size - 1} were removed"
        )
    if bytes(chain_head) != prev:
        raise Damage(size, "the chain head recorded in the head row does not match the last entry")
    if bytes(root) != tree.root():
        raise Damage(None, "the Merkle root recorded in the head row does not match the entries")
    for cp in checkpoints:
        check_checkpoint(cp, tree, hashes[cp[0] - 1] if 0 < cp[0] <= n else None)
    return Scan(dim, labels, texts, vectors, hashes, tree, trusted, records.ignored, records.reasons)


def _held_rows(conn, size: int, width: int) -> int:
    """The rows to allocate for: the head's size bounded by the rows held, once the head's dim
    is bounded by the vector bytes held (raise Damage before anything is allocated for more)."""
    held, held_bytes = conn.execute(
        "SELECT count(*), coalesce(sum(octet_length(vector)), 0) FROM ocrr_entries"
    ).fetchone()
    rows = min(size, held)
    if rows * width * _F4LE.itemsize > held_bytes:
        wrong = conn.execute(
            "SELECT seq FROM ocrr_entries WHERE octet_length(vector) <> %s ORDER BY seq LIMIT 1",
            (width * _F4LE.itemsize,),
        ).fetchone()
        raise Damage(
            None if wrong is None else wrong[0],
            f"the head row's dim {width} would need {rows * width * _F4LE.itemsize} bytes of vectors for {rows} "
            f"entries, more than the {held_bytes} bytes stored (dim edited)",
        )
    return rows


def report_of(conn, trust_until: int | None, vkeys: Sequence[str] = ()) -> tuple[LedgerReport, Scan | None]:
    """Check the ledger the connection's search_path names, in one snapshot; the report and,
    when intact, what it holds. ``trust_until`` None: rehash everything; else trust the
    entries before the last checkpoint authenticated by one of ``vkeys``."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                scan = _scan(conn, trust_until, vkeys)
            except Damage as d:
                n = conn.execute("SELECT count(*) FROM ocrr_entries").fetchone()[0]
                return LedgerReport(False, n, d.first_bad, d.reason), None
    except psycopg.errors.UndefinedTable as e:
        return LedgerReport(False, 0, None, f"the ledger's tables are missing ({e.diag.message_primary})"), None
    return ok_report(scan), scan
