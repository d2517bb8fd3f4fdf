"""A PostgreSQL ledger's location: a ``postgresql://`` URL, shown without its password, and
the connection to it (psycopg 3, the optional extra ``ocrr[postgres]``, imported only here
and only when a database ledger is used)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ocrr.errors import OcrrError

__all__ = ["configure", "connect", "is_database_url", "psycopg_modules", "redact"]

_SCHEMES = ("postgresql://", "postgres://")
_INSTALL = "pip install -e '.[postgres]' (psycopg 3 and psycopg-pool)"


def is_database_url(location: object) -> bool:
    """Whether a ledger location names a PostgreSQL database rather than a file."""
    return isinstance(location, str) and location.startswith(_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def psycopg_modules():
    """psycopg and psycopg_pool, or an OcrrError naming the extra to install."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as e:
        raise OcrrError(f"a PostgreSQL ledger needs psycopg ({e}); {_INSTALL}") from None
    return psycopg, psycopg_pool


def configure(conn) -> None:
    # Acknowledged = flushed to the WAL on disk; whatever the server's or role's default says.
    conn.execute("SET synchronous_commit = on")


def connect(url: str, **kwargs):
    """A psycopg connection (autocommit, ``synchronous_commit = on``), or an OcrrError naming the fix."""
    psycopg, _ = psycopg_modules()
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10, **kwargs)
    except psycopg.Error as e:
        raise OcrrError(
            f"cannot connect to the ledger database {redact(url)} ({str(e).strip()}); check the URL, that the "
            "server runs, and the role's password (PGPASSWORD or ~/.pgpass keep it out of the URL)"
        ) from None
    configure(conn)
    return conn
