"""``check_memory``: an open that reads a ledger's rows into memory first asks whether they
fit in what is left (``ocrr.utils.memory.available_bytes``), on SQLite and on PostgreSQL: too
little gets one error naming the memory needed and left, before any row is read; a check
that holds no rows does not ask."""

# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments

from __future__ import annotations

import numpy as np
import pytest
from tests.ledger.damage_appender import DIM, rows
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger import rows as row_rules
from ocrr.ledger.location import scan_location
from ocrr.ledger.sqlite.file import Ledger
from ocrr.ledger.sqlite.store import DurableLedger

ENTRIES = 12
NEED = ENTRIES * DIM * 4


@pytest.fixture
def left(monkeypatch):
    """Set what the system says is left (these rows are small: asked about all the same)."""
    asked = []
    monkeypatch.setattr(row_rules, "_ASK_FROM", 0)

    def leave(nbytes):
        monkeypatch.setattr(row_rules, "available_bytes", lambda: asked.append(nbytes) or nbytes)
        return asked

    return leave


def _refused(open_it) -> None:
    with pytest.raises(OcrrError, match=rf"{ENTRIES} entries of {DIM} float32 need .* GB of memory for their rows"):
        open_it()


def test_a_file_whose_rows_do_not_fit_is_refused_and_one_whose_rows_do_is_opened(tmp_path, left):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(*rows(ENTRIES, 0))
    asked = left(NEED - 1)
    _refused(lambda: DurableLedger.open(path))
    assert asked
    left(NEED)
    with DurableLedger.open(path) as led:
        assert len(led) == ENTRIES


def test_a_check_that_holds_no_rows_does_not_ask(tmp_path, left):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(*rows(ENTRIES, 0))
    asked = left(0)
    report, _ = scan_location(path, "full", rows=False)
    assert report.ok and not asked


def test_small_rows_are_not_asked_about(tmp_path, monkeypatch):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(*rows(ENTRIES, 0))
    monkeypatch.setattr(row_rules, "available_bytes", lambda: pytest.fail("asked about 12 small rows"))
    with DurableLedger.open(path) as led:
        assert len(led) == ENTRIES


def test_rows_asked_for_on_disk_are_read_there_and_memory_is_not_asked_about(tmp_path, left):
    """``Ledger.open(path, vectors_on_disk=folder)``: the open's check reads the rows straight
    into the ledger's vector file, so a file whose rows would not fit in memory opens, with the
    rows the file holds; without a folder the same open is refused."""
    path, folder = tmp_path / "l.db", tmp_path / "vectors"
    folder.mkdir()
    vecs, labels, texts = rows(ENTRIES, 0)
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(vecs, labels, texts)
        head = led.chain_head
    asked = left(NEED - 1)
    _refused(lambda: Ledger.open(path))
    assert asked
    asked.clear()
    with Ledger.open(path, vectors_on_disk=folder) as on_disk:
        assert on_disk.on_disk and not asked
        assert len(on_disk) == ENTRIES and on_disk.head == head
        np.testing.assert_array_equal(on_disk.vectors, vecs)
        assert list(on_disk.labels) == list(labels)
        on_disk.append(vecs[0], "later")  # and it grows past what the file held
    with Ledger.open(path, vectors_on_disk=folder) as again:
        assert len(again) == ENTRIES + 1 and again.label_of(ENTRIES) == "later" and not asked


def test_a_database_whose_rows_do_not_fit_is_refused(pg_url, left):
    from ocrr.ledger.postgres.store import PostgresLedger

    with PostgresLedger.open(pg_url) as pg:
        pg.extend(*rows(ENTRIES, 0))
    left(NEED - 1)
    _refused(lambda: PostgresLedger.open(pg_url))
    left(NEED)
    with PostgresLedger.open(pg_url) as pg:
        assert len(pg) == ENTRIES
