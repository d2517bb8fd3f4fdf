"""A check that only reports (``ocrr ledger verify``, ``head``, ``consistency``) reads and
checks every row but holds none: at ten million entries the rows are tens of gigabytes."""

from __future__ import annotations

import json
import sqlite3

import numpy as np

from ocrr.cli.main import main
from ocrr.ledger.location import scan_location
from ocrr.ledger.sqlite.store import DurableLedger


def _ledger(path, n: int = 300) -> None:
    vecs = np.random.default_rng(3).normal(size=(n, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # a durable ledger takes unit rows only
    with DurableLedger.open(path, dim=8) as led:
        led.extend(vecs, [f"l{i % 7}" for i in range(n)], [f"t{i}" for i in range(n)])


def test_a_scan_without_rows_checks_the_same_and_holds_only_the_tree(tmp_path):
    path = tmp_path / "l.db"
    _ledger(path)
    full, with_rows = scan_location(path)
    report, without = scan_location(path, rows=False)
    assert report == full
    assert without.tree.root() == with_rows.tree.root() and without.hashes == with_rows.hashes
    assert len(with_rows.vectors) == 300 and len(without.vectors) == 0
    assert not without.labels and not without.texts

    with sqlite3.connect(path) as conn:  # one stored vector edited: still found without rows
        conn.execute("UPDATE entries SET vector = ? WHERE id = 123", (np.ones(8, "<f4").tobytes(),))
    damaged, scan = scan_location(path, rows=False)
    assert not damaged and damaged.first_bad == 123 and scan is None


def test_ledger_verify_reports_as_before(tmp_path, capsys):
    path = tmp_path / "l.db"
    _ledger(path)
    assert main(["ledger", "verify", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["size"] == 300 and out["root"] == scan_location(path)[0].root
