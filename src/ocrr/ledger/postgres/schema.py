"""The ledger's tables in PostgreSQL, the triggers that keep them append-only, and the roles.

One ledger per PostgreSQL schema (the connection's ``search_path`` picks it, e.g. a URL
ending in ``?options=-csearch_path%3Dledger1``; ``public`` by default). Its tables:

* ``ocrr_entries``: one row per entry, the same columns as the SQLite file's ``entries``
  (``seq`` is the entry id, gap-free: the RFC 6962 leaf index) plus the Merkle ``leaf``;
* ``ocrr_head``: one row, the committed size, chain head and Merkle root (and the format,
  version and dimension). Every append locks it (``SELECT … FOR UPDATE``): the lock that
  keeps the log one gap-free sequence with several writers;
* ``ocrr_checkpoints``: (size, chain head, root, time, signed note) of every full
  verification by a ledger with a signing key (``ocrr.ledger.checkpoint_records``);
* ``ocrr_verifications``: outcomes of ``/verify`` and damage one replica found, which the
  others honour.

Append-only is enforced in the database twice: triggers reject UPDATE, DELETE and TRUNCATE
of entries, checkpoints and verifications and any change of the head row but its growth,
for every role (a superuser can disable triggers, which ``verify`` then catches); and
``ROLES_SQL`` grants the service role INSERT and SELECT only (UPDATE on the head row).
An ``AFTER INSERT`` statement trigger sends ``NOTIFY ocrr_ledger, '<schema>'``: replicas
wake up and read what is new (``ocrr.ledger.postgres.follow``). The DDL is ``schema.sql``.
"""

from __future__ import annotations

from importlib.resources import files

from ocrr.ledger.chain import GENESIS
from ocrr.ledger.verify import EMPTY_ROOT

__all__ = [
    "CHANNEL",
    "FORMAT",
    "VERSION",
    "ROLES_SQL",
    "TABLES_SQL",
    "create_schema",
    "has_note_column",
    "roles_sql",
]

FORMAT, VERSION = "ocrr-ledger", 1
CHANNEL = "ocrr_ledger"  # NOTIFY channel; the payload is the schema, so one channel serves all ledgers
_SCHEMA_LOCK = 0x6F637272  # pg_advisory_xact_lock key ("ocrr"): one creator of the tables at a time

# The DDL (tables, triggers, the head row's rules): schema.sql beside this module, package data.
TABLES_SQL = files("ocrr.ledger.postgres").joinpath("schema.sql").read_text(encoding="utf-8")

# {schema}, {service}, {reader}: filled in by roles_sql. The owner (who ran TABLES_SQL, e.g.
# by opening the ledger once) keeps DDL; the service appends and reads; an auditor reads.
ROLES_SQL = """
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM PUBLIC;
GRANT USAGE ON SCHEMA {schema} TO {service}, {reader};
GRANT SELECT, INSERT ON {schema}.ocrr_entries, {schema}.ocrr_checkpoints, {schema}.ocrr_verifications TO {service};
GRANT SELECT, UPDATE ON {schema}.ocrr_head TO {service};
GRANT USAGE ON SEQUENCE {schema}.ocrr_verifications_id_seq TO {service};
GRANT SELECT ON {schema}.ocrr_entries, {schema}.ocrr_checkpoints, {schema}.ocrr_verifications,
    {schema}.ocrr_head TO {reader};
"""


def roles_sql(schema: str = "public", service: str = "ocrr_service", reader: str = "ocrr_reader") -> str:
    """The GRANTs for an existing service role and auditor role on a ledger's schema (run as
    the tables' owner). Names are quoted as SQL identifiers."""
    q = {k: '"' + v.replace('"', '""') + '"' for k, v in (("schema", schema), ("service", service), ("reader", reader))}
    return ROLES_SQL.format(**q)


def create_schema(conn, dim: int | None) -> None:
    """Create the tables, triggers and head row if missing (idempotent; one creator at a time).
    ``conn``: a psycopg connection in autocommit mode, its search_path on the ledger's schema."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        exists = conn.execute("SELECT to_regclass('ocrr_head') IS NOT NULL").fetchone()[0]
        if not exists:
            conn.execute(TABLES_SQL)
        elif not has_note_column(conn):  # tables from before signed checkpoint records
            _add_note_column(conn)
        if conn.execute("SELECT EXISTS (SELECT 1 FROM ocrr_head)").fetchone()[0]:
            return  # set up already (a service role may not insert the head row, and need not)
        conn.execute(
            "INSERT INTO ocrr_head (format, version, dim, size, chain_head, root) VALUES (%s, %s, %s, 0, %s, %s) "
            "ON CONFLICT (one) DO NOTHING",
            (FORMAT, VERSION, dim, GENESIS, EMPTY_ROOT),
        )


def has_note_column(conn) -> bool:
    """Whether ``ocrr_checkpoints`` has its ``note`` column (tables from before signed
    checkpoint records do not: their rows are unauthenticated)."""
    return conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('ocrr_checkpoints') "
        "AND attname = 'note' AND NOT attisdropped)"
    ).fetchone()[0]


def _add_note_column(conn) -> None:
    import psycopg

    from ocrr.errors import OcrrError

    try:
        with conn.transaction():  # a savepoint: the error below leaves the outer transaction usable
            conn.execute("ALTER TABLE ocrr_checkpoints ADD COLUMN IF NOT EXISTS note text")
    except psycopg.errors.InsufficientPrivilege as e:
        raise OcrrError(
            f"the ledger's checkpoints table lacks the note column of signed checkpoint records and this role "
            f"may not add it ({e.diag.message_primary}); open the ledger once as the schema's owner"
        ) from None
