# ruff: noqa: F811 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments
"""``ocrr ledger import`` reads each line strictly: a key given twice (another parser may read
the other value), an id that is not a JSON integer (``1.0``, ``true``, ``"1"``) and bytes that
are not UTF-8 are refused with the line's number, into a file and into PostgreSQL alike; a file
that is no export at all (a ledger given for its export, binary bytes) is named for what it is."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.errors import OcrrError
from ocrr.ledger.location import export_jsonl, import_jsonl
from ocrr.ledger.sqlite.store import DurableLedger

DIM = 4


@pytest.fixture
def export(tmp_path):
    v = np.random.default_rng(0).normal(size=(4, DIM)).astype(np.float32)
    with DurableLedger.open(tmp_path / "src.db", dim=DIM) as led:
        led.extend(v / np.linalg.norm(v, axis=1, keepdims=True), ["a", "b", "a", "b"], None)
    export_jsonl(tmp_path / "src.db", tmp_path / "a.jsonl")
    return tmp_path / "a.jsonl"


def _with_line(export, index: int, line: str):
    lines = export.read_text().splitlines()
    lines[index] = line
    out = export.with_name("edited.jsonl")
    out.write_text("\n".join(lines) + "\n")
    return out


def _duplicate_label(export):
    """Entry 1's line with a forged "label" member before the genuine one: json.loads keeps the
    last (which hashes), a parser that keeps the first reads the forgery."""
    line = export.read_text().splitlines()[2]
    return _with_line(export, 2, line.replace('{"id":1,', '{"id":1,"label":"forged",'))


def _id_as(export, raw: str):
    line = json.loads(export.read_text().splitlines()[2])
    text = json.dumps(line, separators=(",", ":")).replace('"id":1,', f'"id":{raw},')
    return _with_line(export, 2, text)


def _not_utf8(export):
    """Entry 2's label with a byte that is not UTF-8 (the line is named, not the first one)."""
    lines = export.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"label":"a"', b'"label":"\xff"')
    out = export.with_name("edited.jsonl")
    out.write_bytes(b"\n".join(lines))
    return out


def _binary(export):
    out = export.with_name("edited.jsonl")
    out.write_bytes(np.random.default_rng(1).bytes(3000).replace(b"\n", b"\xff"))
    return out


CASES = [
    ("duplicate", _duplicate_label, r"edited\.jsonl:3 .*the key 'label' appears twice"),
    ("float id", lambda e: _id_as(e, "1.0"), r"edited\.jsonl:3 .*id 1\.0 is not an integer"),
    ("not UTF-8", _not_utf8, r"edited\.jsonl:4 is not UTF-8 text \(byte 18: invalid start byte\); the export was"),
    ("binary", _binary, r"edited\.jsonl is not a ledger export: its first line is not UTF-8 text \(byte 1: "),
    ("bool id", lambda e: _id_as(e, "true"), r"edited\.jsonl:3 .*id True is not an integer"),
    ("string id", lambda e: _id_as(e, '"1"'), r"edited\.jsonl:3 .*id '1' is not an integer"),
    ("NaN", lambda e: _with_line(e, 0, e.read_text().splitlines()[0][:-1] + ',"x":NaN}'), r"edited\.jsonl:1 "),
]


def test_the_unedited_export_imports(export, tmp_path):
    with import_jsonl(export, tmp_path / "ok.db") as led:
        assert len(led) == 4


@pytest.mark.parametrize("name, edit, message", CASES, ids=[c[0] for c in CASES])
def test_import_into_a_file_refuses(export, tmp_path, name, edit, message):
    with pytest.raises(OcrrError, match=message):
        import_jsonl(edit(export), tmp_path / "out.db")
    assert not (tmp_path / "out.db").exists()


@pytest.mark.parametrize("name, edit, message", CASES[:5], ids=[c[0] for c in CASES[:5]])
def test_import_into_postgres_refuses(export, pg_url, name, edit, message):
    from ocrr.ledger.postgres.transfer import import_into_database

    with pytest.raises(OcrrError, match=message):
        import_into_database(edit(export), pg_url)


def test_a_ledger_given_for_its_export_is_named_with_the_commands_that_copy_it(export, tmp_path):
    ledger, out = tmp_path / "src.db", tmp_path / "out.db"
    with pytest.raises(OcrrError) as refused:
        import_jsonl(ledger, out)
    assert str(refused.value) == (
        f"{ledger} is an SQLite file (a ledger?), not a ledger export (.jsonl): to copy the ledger file, run "
        f"`ocrr ledger migrate {ledger} {out}`; to import the ledger, export it first (`ocrr ledger export "
        f"{ledger} --out {tmp_path / 'src.jsonl'}`) and import that file"
    )
    assert not out.exists()


def test_a_ledger_given_for_its_export_into_postgres_is_named_too(export, tmp_path, pg_url):
    from ocrr.ledger.postgres.transfer import import_into_database

    with pytest.raises(OcrrError, match=r"src\.db is an SQLite file .*: to import the ledger, export it first"):
        import_into_database(tmp_path / "src.db", pg_url)
