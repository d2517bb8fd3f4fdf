"""Where a ledger lives: a file path (SQLite, the embedded default) or a PostgreSQL URL.

The one place a location given by a user becomes a store: ``open_store`` (a
``DurableLedger`` on the file, or a ``PostgresLedger`` for ``postgresql://…`` /
``postgres://…``) and ``scan_location`` (check it read-only). ``as_location`` keeps a URL
a string where a path would become a ``Path``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, default_origin
from ocrr.ledger.postgres import PostgresLedger, connect, is_database_url, redact
from ocrr.ledger.postgres_scan import report_of
from ocrr.ledger.scan import LedgerReport, _Scan, scan_file
from ocrr.ledger.store import Apply, DurableLedger

__all__ = ["Location", "as_location", "default_origin_of", "display", "is_database_url", "open_store", "scan_location"]

Location = str | os.PathLike[str]


def as_location(value: Location) -> Path | str:
    """A database URL as given; anything else as a ``Path`` (for argparse ``type=``)."""
    return str(value) if is_database_url(value) else Path(value)


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
) -> DurableLedger:
    """Open (creating if missing) and check the ledger at ``location``; refuse a damaged one.
    ``signer``: signs checkpoint records, and only its records are trusted (none without)."""
    if isinstance(location, str) and is_database_url(location):
        return PostgresLedger.open(location, dim=dim, verify=verify, apply=apply, signer=signer)
    return DurableLedger.open(location, dim=dim, verify=verify, apply=apply, signer=signer)


def scan_location(
    location: Location, verify: str = "full", vkeys: Sequence[str] = ()
) -> tuple[LedgerReport, _Scan | None]:
    """Check the ledger at ``location`` (read-only, nothing created): the report and, when
    intact, what it holds. ``vkeys``: the verifier keys whose checkpoint records are trusted
    (none: no record is, and ``verify="checkpoint"`` rehashes every entry)."""
    if not (isinstance(location, str) and is_database_url(location)):
        return scan_file(location, verify, vkeys)
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
