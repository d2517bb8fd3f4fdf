# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""On PostgreSQL the appenders' check for damage another process recorded runs inside the
group commit's transaction, answered from what its first statement read: no connection (and
round trip) of its own, and damage recorded before the commit still fails the append."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.damage_appender import DIM, Appender, damage_by_another_fails_the_next_append
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.ledger.postgres.store import PostgresLedger


def test_the_damage_check_takes_no_connection_of_its_own(pg_url):
    with PostgresLedger.open(pg_url, dim=DIM, gather=0) as led:
        appender = Appender(led)
        appender.append(0)  # the committer thread is running
        before = led._pool.get_stats().get("requests_num", 0)
        ids, err = appender.append(1)
        assert err is None and ids == range(3, 6)
        # the commit runs on the connection it keeps (no request), and the check asks for none
        assert led._pool.get_stats().get("requests_num", 0) - before == 0
        assert led._kept is not None


def test_damage_recorded_by_another_process_fails_the_next_append(pg_url):
    with PostgresLedger.open(pg_url, dim=DIM, gather=0) as led, PostgresLedger.open(pg_url) as other:
        damage_by_another_fails_the_next_append(led, other)
