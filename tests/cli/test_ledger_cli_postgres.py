# ruff: noqa: F811, E402 - pytest passes the imported fixtures (pg_cluster, pg_url) as arguments; psycopg may be missing
"""`ocrr ledger verify/head/prove/consistency/export` on a postgresql:// URL as on a file, and
`ocrr ledger import` into a database."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

psycopg = pytest.importorskip("psycopg", reason="pip install -e '.[postgres]' (psycopg 3)")
from tests.ledger.pg_cluster import pg_cluster, pg_url  # noqa: F401

from ocrr.cli.main import main
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.postgres.store import PostgresLedger
from ocrr.ledger.sqlite.store import DurableLedger

VERIFY_PY = Path(__file__).resolve().parents[2] / "src" / "ocrr" / "ledger" / "verify.py"


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)  # a ledger import takes unit rows only


@pytest.fixture()
def db(pg_url):
    rng = np.random.default_rng(0)
    with PostgresLedger.open(pg_url) as led:
        for i in range(11):
            led.append(_unit(rng.normal(size=4)), f"c{i % 3}", f"text {i}" if i % 2 else None)
    return pg_url


def _json(capsys, argv) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_verify_head_prove_consistency_on_a_database(db, capsys, tmp_path):
    code, out = _json(capsys, ["ledger", "verify", db])
    assert code == 0 and out["ok"] and out["size"] == 11
    code, head = _json(capsys, ["ledger", "head", db])
    assert code == 0 and head["size"] == 11 and head["root"] == out["root"]
    code, proof = _json(capsys, ["ledger", "prove", db, "--entry", "4", "--size", "9"])
    assert code == 0 and proof["entry"]["label"] == "c1"
    (tmp_path / "p.json").write_text(json.dumps(proof))
    checked = subprocess.run(
        [sys.executable, str(VERIFY_PY), "inclusion", str(tmp_path / "p.json"), "--size", "9", "--root", proof["root"]],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stderr
    code, cons = _json(capsys, ["ledger", "consistency", db, "--from", "3"])
    assert code == 0 and cons["root_to"] == head["root"]
    code, held = _json(capsys, ["ledger", "verify", db, "--expect-size", "3", "--expect-root", cons["root_from"]])
    assert code == 0 and held["extends_held_head"]


def test_a_signed_checkpoint_of_a_database(db, capsys, tmp_path):
    assert main(["ledger", "keygen", str(tmp_path / "k.pem"), "--origin", "example.com/db"]) == 0
    vkey = capsys.readouterr().out.strip()
    assert (
        main(["ledger", "head", db, "--key", str(tmp_path / "k.pem"), "--origin", "example.com/db", "--checkpoint"])
        == 0
    )
    origin, size, root = verify_checkpoint(capsys.readouterr().out, vkey)
    assert (origin, size) == ("example.com/db", 11)


def test_export_import_between_file_and_database(db, pg_cluster, capsys, tmp_path):  # noqa: F811
    from tests.ledger.pg_cluster import drop_schema, new_schema

    assert main(["ledger", "export", db, "--out", str(tmp_path / "db.jsonl")]) == 0
    code, made = _json(capsys, ["ledger", "import", str(tmp_path / "db.jsonl"), str(tmp_path / "copy.db")])
    assert code == 0 and made["size"] == 11
    assert main(["ledger", "export", str(tmp_path / "copy.db"), "--out", str(tmp_path / "file.jsonl")]) == 0
    assert (tmp_path / "file.jsonl").read_bytes() == (tmp_path / "db.jsonl").read_bytes()
    schema = new_schema(pg_cluster)
    try:
        target = pg_cluster.url(schema)
        code, loaded = _json(
            capsys, ["ledger", "import", str(tmp_path / "file.jsonl"), target, "--expect-root", made["root"]]
        )
        assert code == 0 and loaded["size"] == 11 and loaded["root"] == made["root"]
        assert main(["ledger", "export", target]) == 0
        assert capsys.readouterr().out.encode() == (tmp_path / "db.jsonl").read_bytes()
        assert main(["ledger", "import", str(tmp_path / "file.jsonl"), target]) == 2
        assert "already holds a ledger of 11 entries" in capsys.readouterr().err
    finally:
        drop_schema(pg_cluster, schema)
    with DurableLedger.open(tmp_path / "copy.db") as copy:
        assert copy.root() == base64.b64decode(made["root"])


def test_a_tampered_database_fails_verify_naming_the_entry(db, capsys):
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE ocrr_entries SET text = 'edited' WHERE seq = 6")
    code, out = _json(capsys, ["ledger", "verify", db])
    assert code == 1 and not out["ok"] and out["first_bad"] == 6
    assert main(["ledger", "head", db]) == 2
    assert "damaged at entry 6" in capsys.readouterr().err


def test_an_unreachable_database_is_one_clear_error(capsys):
    assert main(["ledger", "verify", "postgresql://u:secret@127.0.0.1:1/db"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to the ledger database postgresql://u:***@127.0.0.1:1/db" in err
    assert "secret" not in err and "Traceback" not in err
