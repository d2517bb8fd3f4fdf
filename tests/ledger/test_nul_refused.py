# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""A label or text holding NUL (U+0000) is refused at the door of every store with one error
naming the fix, and nothing changes: PostgreSQL's text cannot hold one (it used to fail
there as a storage error), and a ledger moves between stores, so SQLite refuses it too."""

from __future__ import annotations

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.sqlite.store import DurableLedger

ROW = np.eye(4, dtype=np.float32)[:1]


def _refuses_nul(led) -> None:
    led.extend(ROW, ["before"], [None])
    with pytest.raises(OcrrError, match=r"the label of item 0 holds a NUL character \(U\+0000\).*; remove it"):
        led.extend(ROW, ["a\x00b"], [None])
    with pytest.raises(OcrrError, match=r"the text of item 1 holds a NUL character"):
        led.extend(np.vstack([ROW, ROW]), ["ok", "ok"], ["fine", "x\x00"])
    led.extend(ROW, ["after"], ["a text"])  # the ledger took nothing of them and goes on
    assert len(led) == 2 and [row[1] for row in led.read_entries(0, 2)] == ["before", "after"]
    assert led.verify().ok


def test_sqlite_refuses_nul(tmp_path):
    with DurableLedger.open(tmp_path / "l.db", dim=4) as led:
        _refuses_nul(led)


def test_postgresql_refuses_nul_as_the_callers_error_not_storages(pg_url):
    with PostgresLedger.open(pg_url, dim=4) as led:
        _refuses_nul(led)
