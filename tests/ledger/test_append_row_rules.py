# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""A durable ledger's appends (``extend``, ``append``, ``submit``: ``group_commit.check_batch``)
take only the rows reading the file back takes (``ocrr.ledger.rows``): finite and of unit
norm. A refusal names the first offending row and the fix, and writes nothing; a row taken
is one ``ocrr ledger import`` and ``ocrr serve`` (``open_substrate``) take back."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger import Ledger
from ocrr.ledger.location import export_jsonl, import_jsonl
from ocrr.ledger.rows import UNIT_TOLERANCE
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.substrate.persistent import open_substrate

DIM = 8
FIX = "np.linalg.norm(vecs, axis=1, keepdims=True)"


def _unit(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _stored(path) -> tuple[list, ...]:
    """What the file holds, read apart from the ledger: its entries, tree nodes and meta."""
    conn = sqlite3.connect(path)
    try:
        return tuple(conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall() for t in ("entries", "nodes", "meta"))
    finally:
        conn.close()


def _bad(kind: str) -> np.ndarray:
    rows = _unit(5, seed=1)
    if kind == "not unit":
        rows[2] *= 2
    elif kind == "NaN":
        rows[2, 3] = np.nan
    else:
        rows[2, 3] = np.inf
    return rows


_REFUSAL = {
    "not unit": r"^vector 2 has norm 2; a ledger stores unit vectors .*" + FIX.replace("(", r"\(").replace(")", r"\)"),
    "NaN": r"^vector 2 contains NaN or infinity",
    "inf": r"^vector 2 contains NaN or infinity",
}


@pytest.mark.parametrize("kind", ["not unit", "NaN", "inf"])
def test_a_refused_append_names_the_first_bad_row_and_writes_nothing(tmp_path, kind):
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=DIM) as led:
        led.extend(_unit(3), ["a", "b", "a"])
        before, head = _stored(path), led.chain_head
        with pytest.raises(OcrrError, match=_REFUSAL[kind]):
            led.extend(_bad(kind), ["x"] * 5)
        with pytest.raises(OcrrError, match=_REFUSAL[kind].replace("vector 2", "vector 0")):
            led.append(_bad(kind)[2], "x")
        with pytest.raises(OcrrError, match=_REFUSAL[kind]):  # refused at the door: nothing queued
            led.submit(_bad(kind), ["x"] * 5, None, lambda ids, err: pytest.fail("told of a refused append"))
        assert len(led) == 3 and led.chain_head == head and _stored(path) == before
        assert list(led.extend(_unit(2, seed=2), ["c", "d"])) == [3, 4]  # and it goes on
    with DurableLedger.open(path) as again:
        assert len(again) == 5 and again.verify().ok


def test_unit_rows_are_taken_in_any_float_type_within_the_tolerance(tmp_path):
    rows64 = np.random.default_rng(3).normal(size=(4, DIM))
    rows64 /= np.linalg.norm(rows64, axis=1, keepdims=True)
    nearly = _unit(2, seed=4)
    nearly[0] *= 1 + UNIT_TOLERANCE / 2
    nearly[1] *= 1 - UNIT_TOLERANCE / 2
    with DurableLedger.open(tmp_path / "l.db", dim=DIM) as led:
        assert list(led.extend(rows64, ["a"] * 4)) == [0, 1, 2, 3]  # float64, stored as float32
        assert led.append(rows64[0].tolist(), "b") == 4
        assert list(led.extend(nearly, ["c", "d"])) == [5, 6]
        beyond = _unit(1, seed=5) * (1 + 2 * UNIT_TOLERANCE)
        with pytest.raises(OcrrError, match="vector 0 has norm 1.002"):
            led.extend(beyond, ["e"])
        assert len(led) == 7


def test_what_an_append_takes_import_and_serve_take_back(tmp_path):
    """The same rule on both sides: rows at the tolerance's edge, appended, export, import and
    open as a served substrate without a refusal."""
    rows = _unit(6, seed=6)
    rows[1] *= 1 + UNIT_TOLERANCE * 0.9
    rows[4] *= 1 - UNIT_TOLERANCE * 0.9
    with DurableLedger.open(tmp_path / "l.db", dim=DIM) as led:
        led.extend(rows, [f"l{i % 2}" for i in range(6)])
    export_jsonl(tmp_path / "l.db", tmp_path / "l.jsonl")
    import_jsonl(tmp_path / "l.jsonl", tmp_path / "copy.db")
    with open_substrate(tmp_path / "copy.db") as sub:
        assert len(sub) == 6


def test_a_file_backed_ledger_refuses_a_bad_row_at_the_append(tmp_path):
    """``Ledger.open``'s appends reach the file at ``flush``; a row the file would refuse is
    refused at the append, alone, naming the fix: the entries before and after it are written."""
    path = tmp_path / "l.db"
    with Ledger.open(path, dim=DIM) as led:
        led.extend(_unit(2), ["a", "b"])
        with pytest.raises(OcrrError, match=_REFUSAL["not unit"]):
            led.extend(_bad("not unit"), ["x"] * 5)
        with pytest.raises(OcrrError, match=_REFUSAL["not unit"].replace("vector 2", "vector 0")):
            led.append(_bad("not unit")[2], "x")
        assert len(led) == 2
        led.append(_unit(1, seed=7)[0], "c")
    with Ledger.open(path) as again:
        assert again.labels == ("a", "b", "c") and again.verify().ok
    assert Ledger(DIM).extend(_bad("not unit"), ["x"] * 5) == range(5)  # in memory: any finite row, as before
