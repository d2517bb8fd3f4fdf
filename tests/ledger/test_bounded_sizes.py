# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""Sizes and dimensions read from storage or an export's header are bounded by what is held
(rows, bytes, a maximum dimension) before anything is allocated for them: an absurd claim is
one clean report or error, never a MemoryError or a traceback. ``tracemalloc`` sees numpy's
buffers, so the tests check what a claim made the reader allocate, without needing terabytes."""

from __future__ import annotations

import json
import sqlite3
import tracemalloc

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.location import export_jsonl, import_jsonl, scan_location
from ocrr.ledger.sqlite.scan import scan_file
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 8
N = 2000
_LIMIT = 32 << 20  # bytes: N rows of DIM floats are 64 kB; a claim of 65536 dims would be 500 MB


def _unit(n: int) -> np.ndarray:
    v = np.random.default_rng(0).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _peak(fn):
    """``fn()`` and the peak bytes it allocated."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def ledger(tmp_path):
    with DurableLedger.open(tmp_path / "l.db", dim=DIM) as led:
        led.extend(_unit(N), [f"l{i % 3}" for i in range(N)], None)
    return tmp_path / "l.db"


def _set_meta(path, key: str, value: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    conn.close()


@pytest.mark.parametrize("key, value", [("dim", 1 << 16), ("dim", 10**12), ("size", 10**15), ("size", -1)])
def test_a_file_claiming_an_absurd_size_or_dim_is_reported_not_allocated(ledger, key, value, capsys):
    _set_meta(ledger, key, value)
    (report, scan), peak = _peak(lambda: scan_file(ledger))
    assert not report.ok and scan is None
    assert peak < _LIMIT, f"the scan allocated {peak} bytes for the claim"
    assert key in report.reason or "entries" in report.reason, report.reason
    assert main(["ledger", "verify", str(ledger)]) != 0  # a report, not a traceback
    with pytest.raises(OcrrError, match="is damaged"):
        DurableLedger.open(ledger)  # what `ocrr serve` opens


def test_the_dim_claim_names_the_first_entry_of_another_width(ledger):
    _set_meta(ledger, "dim", 1 << 16)
    report, _ = scan_file(ledger)
    assert report.first_bad == 0 and "dim" in report.reason


def _header(src, out, **claims):
    lines = src.read_text().splitlines()
    header = json.loads(lines[0])
    header.update(claims)
    lines[0] = json.dumps(header)
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize(
    "claims, message",
    [
        (
            {"dim": 10**12},
            r"claims dimension 1000000000000; a ledger.s dimension is a whole number in 1\.\.65536",
        ),
        ({"dim": None}, r"header claims dimension None"),
        ({"size": 10**12}, r"header claims 1000000000000 entries but the file is \d+ bytes long"),
        ({"size": -3}, r"header's size -3 is not a whole number"),
        ({"size": 1.5}, r"header's size 1\.5 is not a whole number"),
    ],
)
def test_an_export_header_with_an_absurd_claim_is_refused_before_allocating(ledger, tmp_path, capsys, claims, message):
    export_jsonl(ledger, tmp_path / "a.jsonl")
    bad = _header(tmp_path / "a.jsonl", tmp_path / "bad.jsonl", **claims)
    with pytest.raises(OcrrError, match=message):
        import_jsonl(bad, tmp_path / "out.db")
    assert main(["ledger", "import", str(bad), str(tmp_path / "out2.db")]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "out.db").exists() and not (tmp_path / "out2.db").exists()


def _tamper(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # the append-only triggers off
        conn.execute(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE ocrr_head SET size = 1000000000000",
        "UPDATE ocrr_head SET dim = 65536",
        "UPDATE ocrr_head SET dim = 2000000000",
    ],
)
def test_a_database_head_claiming_an_absurd_size_or_dim_is_reported_not_allocated(pg_url, sql):
    from ocrr.ledger.postgres.store import PostgresLedger

    with PostgresLedger.open(pg_url, dim=DIM) as pg:
        pg.extend(_unit(N), [f"l{i % 3}" for i in range(N)], None)
    _tamper(pg_url, sql)
    (report, scan), peak = _peak(lambda: scan_location(pg_url))
    assert not report.ok and scan is None
    assert peak < _LIMIT, f"the scan allocated {peak} bytes for the claim"
    with pytest.raises(OcrrError, match="damaged"):
        PostgresLedger.open(pg_url)  # what `ocrr serve` opens


def test_a_postgres_import_header_with_an_absurd_dim_is_refused(ledger, tmp_path, pg_url):
    from ocrr.ledger.postgres.transfer import import_into_database

    export_jsonl(ledger, tmp_path / "a.jsonl")
    bad = _header(tmp_path / "a.jsonl", tmp_path / "bad.jsonl", dim=10**12)
    with pytest.raises(OcrrError, match="header claims dimension 1000000000000"):
        import_into_database(bad, pg_url)
