"""Where a ledger lives: a file path (SQLite, the embedded default) or a PostgreSQL URL.

The one place a location given by a user becomes a store, and the one module outside the
engines' subpackages that names both: ``open_store`` (a ``DurableLedger`` on the file, or a
``PostgresLedger`` for ``postgresql://…`` / ``postgres://…``; either is a ``LedgerStore``),
``scan_location`` (check it read-only), ``export_lines``/``export_jsonl`` and
``import_jsonl`` (the JSONL export of ``ocrr.ledger.transfer``, out of and into either),
``claim_service`` (a file held as its one service). ``as_location`` keeps a URL a string
where a path would become a ``Path``.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, default_origin
from ocrr.ledger.held import Apply
from ocrr.ledger.postgres.scan import report_of
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.postgres.transfer import import_into_database
from ocrr.ledger.postgres.url import connect, is_database_url, redact
from ocrr.ledger.scan import LedgerReport, Scan
from ocrr.ledger.sqlite.inner_nodes import StoredInnerNodes
from ocrr.ledger.sqlite.locks import FileHold, claim_service
from ocrr.ledger.sqlite.reread import CheckedRows
from ocrr.ledger.sqlite.scan import KnownPrefix, scan_file
from ocrr.ledger.sqlite.schema import connect as connect_file
from ocrr.ledger.sqlite.store import DurableLedger, record_verification_in
from ocrr.ledger.sqlite.transfer import import_file
from ocrr.ledger.store import LedgerStore
from ocrr.ledger.transfer import lines_of, write_export

__all__ = [
    "CheckedRows",
    "FileHold",
    "KnownPrefix",
    "Location",
    "StoredInnerNodes",
    "as_location",
    "claim_service",
    "default_origin_of",
    "display",
    "export_jsonl",
    "export_lines",
    "import_jsonl",
    "is_database_url",
    "open_store",
    "record_verification_at",
    "scan_location",
    "stored_shape",
]

Location = str | os.PathLike[str]


def as_location(value: Location) -> Path | str:
    """A database URL as given; anything else as a ``Path`` (for argparse ``type=``)."""
    return str(value) if is_database_url(value) else Path(value)


def stored_shape(path: str | os.PathLike[str]) -> tuple[object, object] | None:
    """(entries, dimension) as the ledger file's meta table states them now, unchecked (a
    caller sizes buffers from them; the check that reads the file says whether they hold),
    or None when the file cannot be read."""
    try:
        conn = connect_file(Path(path), readonly=True)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('size', 'dim')").fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return meta.get("size"), meta.get("dim")


def display(location: Location) -> str:
    """The location as messages show it (a URL without its password)."""
    return redact(location) if isinstance(location, str) and is_database_url(location) else str(location)


def default_origin_of(location: Location) -> str:
    """A stable log name: from the file's name, or the database's host, name and search_path."""
    if not (isinstance(location, str) and is_database_url(location)):
        return default_origin(location)
    parts = urlsplit(location)
    schema = re.search(r"search_path(?:=|%3D)([A-Za-z0-9_]+)", parts.query or "")
    name = "-".join(x for x in (parts.hostname, parts.path.strip("/"), schema and schema.group(1)) if x)
    return f"ocrr.invalid/{re.sub(r'[^A-Za-z0-9._-]', '-', name) or 'ledger'}"


def open_store(
    location: Location,
    dim: int | None = None,
    verify: str = "full",
    apply: Apply | None = None,
    signer: Signer | None = None,
    known: KnownPrefix | None = None,
    unit_rows: bool = False,
) -> LedgerStore:
    """Open (creating if missing) and check the ledger at ``location``; refuse a damaged one.
    ``signer``: signs checkpoint records, and only its records are trusted (none without).
    ``known``: a file's first entries as another process read and checked them (a file only).
    ``unit_rows``: refuse stored rows that break the rows' rules (``ocrr.ledger.rows``)."""
    if isinstance(location, str) and is_database_url(location):
        if known is not None:
            raise ValueError("known entries are handed on for a ledger file only, not a database")
        return PostgresLedger.open(location, dim=dim, verify=verify, apply=apply, signer=signer, unit_rows=unit_rows)
    return DurableLedger.open(
        location, dim=dim, verify=verify, apply=apply, signer=signer, known=known, unit_rows=unit_rows
    )


def record_verification_at(location: Location, report: dict) -> None:
    """``LedgerStore.record_verification`` by a process that does not hold the ledger open (a
    service's supervisor), for a ledger file: in a transaction of its own, in line with the
    file's writers. A database's ledger records them through its open store."""
    if isinstance(location, str) and is_database_url(location):
        raise ValueError("record_verification_at records into a ledger file; a database's store records its own")
    record_verification_in(location, report)


def scan_location(
    location: Location, verify: str = "full", vkeys: Sequence[str] = (), rows: bool = True
) -> tuple[LedgerReport, Scan | None]:
    """Check the ledger at ``location`` (read-only, nothing created): the report and, when
    intact, what it holds. ``vkeys``: the verifier keys whose checkpoint records are trusted
    (none: no record is, and ``verify="checkpoint"`` rehashes every entry). ``rows`` False:
    a ledger file's Scan holds no vectors, labels or texts, only the chain and tree (a
    caller that wants the report or proofs need not hold every row)."""
    if not (isinstance(location, str) and is_database_url(location)):
        return scan_file(location, verify, vkeys, rows)
    if verify not in ("full", "checkpoint"):
        raise OcrrError(f"verify must be 'full' or 'checkpoint', got {verify!r}")
    conn = connect(location)  # an OcrrError naming the extra when psycopg is missing
    import psycopg

    try:
        return report_of(conn, None if verify == "full" else 0, vkeys)
    except psycopg.Error as e:
        raise OcrrError(
            f"cannot read the ledger in {redact(location)} ({str(e).strip()}); check the role's SELECT "
            "privileges on the ledger's tables and that the server is up"
        ) from None
    finally:
        conn.close()


def export_lines(location: Location, verify: str = "full") -> Iterator[str]:
    """The JSONL lines (with newlines) of a ledger (a file or a database URL); refuses a damaged one."""
    report, scan = scan_location(location, verify)
    if not report:
        where = "" if report.first_bad is None else f" at entry {report.first_bad}"
        raise OcrrError(f"ledger {display(location)} is damaged{where}: {report.reason}; not exporting it")
    assert scan is not None  # an intact report comes with what the scan read
    return lines_of(report, scan)


def export_jsonl(location: Location, out: str | os.PathLike[str], verify: str = "full") -> int:
    """Write the JSONL export of the ledger at ``location`` to ``out`` (atomically); return the entry count."""
    return write_export(export_lines(location, verify), out)


def import_jsonl(
    src: str | os.PathLike[str],
    location: Location,
    *,
    expect_size: int | None = None,
    expect_root: bytes | str | None = None,
    checkpoint: str | None = None,
    verifier_key: str | None = None,
) -> LedgerStore:
    """Create the ledger at ``location`` (a new file, or an empty database schema) from a JSONL
    export, checked hash for hash, atomically; refused unless ``expect_size``/``expect_root``
    (bytes, hex or base64) or a signed C2SP ``checkpoint`` with its ``verifier_key`` describe
    the imported log exactly, when given. Returns the new ledger, open."""
    into_database = isinstance(location, str) and is_database_url(location)
    import_into: Callable[..., LedgerStore] = import_into_database if into_database else import_file
    checks = dict(expect_size=expect_size, expect_root=expect_root, checkpoint=checkpoint, verifier_key=verifier_key)
    return import_into(src, location, **checks)
