"""The PostgreSQL engine: a ledger in a database schema, shared by replicas (the ``postgres``
extra; docs/postgres.md).

``schema`` (the tables, append-only triggers and roles; the DDL is ``schema.sql``), ``url``
(a ``postgresql://`` location, shown without its password, and connecting to it), ``scan``
(reading the ledger back and checking it), ``store`` (``PostgresLedger``: appends serialised
on a head row), ``follow`` (replicas following the log) and ``transfer`` (importing a JSONL
export).
"""
