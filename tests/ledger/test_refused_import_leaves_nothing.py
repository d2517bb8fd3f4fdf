# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""A refused ``ocrr ledger import`` leaves nothing behind: no file beside a file target, and
in a database target no tables and no dimension fixed by the refused export (which would
then refuse the right export of another dimension)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.ledger.location import export_jsonl
from ocrr.ledger.postgres.transfer import import_into_database
from ocrr.ledger.sqlite.store import DurableLedger


def _export(folder, dim: int, n: int = 6):
    rng = np.random.default_rng(dim)
    with DurableLedger.open(folder / f"src{dim}.db", dim=dim) as led:
        vecs = rng.normal(size=(n, dim)).astype(np.float32)
        led.extend(vecs / np.linalg.norm(vecs, axis=1, keepdims=True), [f"l{i % 2}" for i in range(n)], None)
    export_jsonl(folder / f"src{dim}.db", folder / f"d{dim}.jsonl")
    return folder / f"d{dim}.jsonl"


def _edited(export, folder):
    """The export with entry 2's label changed (its hash no longer matches)."""
    lines = export.read_text().splitlines()
    entry = json.loads(lines[3])
    entry["label"] = "edited"
    lines[3] = json.dumps(entry)
    out = folder / "edited.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


def test_refused_imports_into_a_file_leave_no_file(tmp_path, capsys):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    export = _export(src, 4)
    assert main(["ledger", "import", str(export), str(out / "a.db")]) == 0
    before = sorted(os.listdir(out))
    for args in (
        [str(export), str(out / "a.db")],  # the target exists
        [str(_edited(export, src)), str(out / "b.db")],  # a bad export
        [str(export), str(out / "c.db"), "--expect-size", "7"],  # not the log expected
    ):
        assert main(["ledger", "import", *args]) == 2
        assert "error:" in capsys.readouterr().err
        assert sorted(os.listdir(out)) == before  # nothing new: no file, no -writer, no folder


def test_a_refused_import_into_a_database_leaves_no_tables_nor_dimension(pg_url, tmp_path):
    psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
    bad = _edited(_export(tmp_path, 4), tmp_path)
    with pytest.raises(OcrrError, match="entry 2 does not hash"):
        import_into_database(bad, pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('ocrr_head'), to_regclass('ocrr_entries')").fetchone() == (None, None)
    with import_into_database(_export(tmp_path, 8), pg_url) as pg:  # another dimension: accepted
        assert len(pg) == 6 and pg.dim == 8
