"""`ocrr ledger ...`: verify, head, prove, consistency, export/import, keygen."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.sqlite.store import DurableLedger

VERIFY_PY = Path(__file__).resolve().parents[2] / "src" / "ocrr" / "ledger" / "verify.py"


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)  # a ledger import takes unit rows only


@pytest.fixture()
def ledger(tmp_path):
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    with DurableLedger.open(path) as led:
        for i in range(11):
            led.append(_unit(rng.normal(size=4)), f"c{i % 3}", f"text {i}" if i % 2 else None)
    return path


def _json(capsys, argv) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_verify_reports_intact_and_damaged_files(ledger, capsys):
    code, out = _json(capsys, ["ledger", "verify", str(ledger)])
    assert code == 0 and out["ok"] and out["size"] == 11
    conn = sqlite3.connect(ledger)
    conn.execute("UPDATE entries SET text = 'edited' WHERE id = 4")
    conn.commit()
    conn.close()
    code, out = _json(capsys, ["ledger", "verify", str(ledger)])
    assert code == 1 and not out["ok"] and out["first_bad"] == 4


def test_proofs_check_with_the_standalone_verifier(ledger, capsys, tmp_path):
    for argv, kind in (
        (["prove", str(ledger), "--entry", "3", "--size", "7"], "inclusion"),
        (["consistency", str(ledger), "--from", "5"], "consistency"),
    ):
        assert main(["ledger", *argv]) == 0
        proof = tmp_path / f"{kind}.json"
        proof.write_text(capsys.readouterr().out)
        doc = json.loads(proof.read_text())
        trusted = ["--size", str(doc.get("size", doc.get("to"))), "--root", doc.get("root", doc.get("root_to"))]
        check = [sys.executable, "-I", str(VERIFY_PY), kind, str(proof), *trusted]
        run = subprocess.run(check, capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
        doc["proof"][0] = doc["proof"][1]  # a forged proof fails
        proof.write_text(json.dumps(doc))
        run = subprocess.run(check, capture_output=True, text=True)
        assert run.returncode == 1 and "FAILED" in run.stdout


def test_verify_against_a_held_head_catches_a_rewrite(ledger, capsys):
    _, cons = _json(capsys, ["ledger", "consistency", str(ledger), "--from", "6"])
    code, out = _json(
        capsys, ["ledger", "verify", str(ledger), "--expect-size", "6", "--expect-root", cons["root_from"]]
    )
    assert code == 0 and out["extends_held_head"]
    code, out = _json(capsys, ["ledger", "verify", str(ledger), "--expect-size", "6", "--expect-root", cons["root_to"]])
    assert code == 1 and not out["extends_held_head"]
    code, out = _json(
        capsys, ["ledger", "verify", str(ledger), "--expect-size", "20", "--expect-root", cons["root_to"]]
    )
    assert code == 1 and "removed" in out["reason"]


def test_verify_takes_the_held_root_in_hex_too_and_names_a_malformed_one(ledger, capsys):
    """The same root forms `ocrr ledger import --expect-root` takes: base64, or 64 hex digits."""
    _, cons = _json(capsys, ["ledger", "consistency", str(ledger), "--from", "6"])
    hex_root = base64.b64decode(cons["root_from"]).hex()
    code, out = _json(capsys, ["ledger", "verify", str(ledger), "--expect-size", "6", "--expect-root", hex_root])
    assert code == 0 and out["extends_held_head"]
    assert main(["ledger", "verify", str(ledger), "--expect-size", "6", "--expect-root", "zz"]) == 2
    assert "is not a SHA-256 root: give 64 hex digits or 44 base64 characters" in capsys.readouterr().err


def test_signed_head_and_checkpoint(ledger, capsys, tmp_path):
    key = tmp_path / "k.pem"
    assert main(["ledger", "keygen", str(key), "--origin", "example.com/t"]) == 0
    vkey = capsys.readouterr().out.strip()
    assert main(["ledger", "head", str(ledger), "--key", str(key), "--origin", "example.com/t", "--checkpoint"]) == 0
    note = capsys.readouterr().out
    _, head = _json(capsys, ["ledger", "head", str(ledger)])
    origin, size, root = verify_checkpoint(note, vkey)
    assert (origin, size) == ("example.com/t", 11) and head["size"] == 11
    assert main(["ledger", "keygen", str(key), "--origin", "example.com/t"]) == 2  # never overwritten


def test_export_import_round_trip_is_byte_identical(ledger, capsys, tmp_path):
    out1, out2, copy = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "copy.db"
    assert main(["ledger", "export", str(ledger), "--out", str(out1)]) == 0
    assert main(["ledger", "import", str(out1), str(copy)]) == 0
    assert main(["ledger", "export", str(copy), "--out", str(out2)]) == 0
    assert out1.read_bytes() == out2.read_bytes()
    lines = out1.read_text().splitlines()
    assert len(lines) == 12 and json.loads(lines[0])["format"] == "ocrr-ledger-jsonl"
    # An edited export is refused, and leaves no file behind.
    entry = json.loads(lines[5])
    entry["label"] = "forged"
    lines[5] = json.dumps(entry)
    out1.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["ledger", "import", str(out1), str(tmp_path / "bad.db")]) == 2
    assert "entry 4 does not hash" in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "bad.db").exists()


def test_import_of_a_ledger_file_names_the_command_that_copies_it(ledger, capsys, tmp_path):
    assert main(["ledger", "import", str(ledger), str(tmp_path / "new.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {ledger} is an SQLite file (a ledger?), not a ledger export (.jsonl)")
    assert f"run `ocrr ledger migrate {ledger} {tmp_path / 'new.db'}`" in err and err.count("\n") == 1
    assert not (tmp_path / "new.db").exists()


def test_bad_arguments_get_one_clear_error(ledger, capsys, tmp_path):
    assert main(["ledger", "prove", str(ledger), "--entry", "11"]) == 2
    assert main(["ledger", "consistency", str(ledger), "--from", "0"]) == 2
    assert main(["ledger", "head", str(tmp_path / "missing.db")]) == 2
    assert main(["ledger", "head", str(ledger), "--checkpoint"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 4


def test_migrate_converts_an_old_format_file_into_a_new_one(tmp_path, capsys):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ledger"))
    from old_format import write_old_format

    from ocrr.ledger import Ledger

    ref = Ledger(4)
    for i in range(7):
        ref.append(np.full(4, float(i), np.float32), f"c{i % 2}", None)
    write_old_format(tmp_path / "old.db", ref)
    code, out = _json(capsys, ["ledger", "verify", str(tmp_path / "old.db")])
    assert code == 1 and "ocrr ledger migrate" in out["reason"]
    code, out = _json(capsys, ["ledger", "migrate", str(tmp_path / "old.db"), str(tmp_path / "new.db")])
    assert code == 0 and out["ok"] and out["size"] == 7 and out["path"] == str(tmp_path / "new.db")
    code, out = _json(capsys, ["ledger", "verify", str(tmp_path / "new.db")])
    assert code == 0 and out["size"] == 7
    assert main(["ledger", "migrate", str(tmp_path / "old.db"), str(tmp_path / "new.db")]) != 0
    assert "already exists" in capsys.readouterr().err


def _damaged(ledger: Path) -> Path:
    conn = sqlite3.connect(ledger)
    conn.execute("UPDATE entries SET text = 'edited' WHERE id = 4")
    conn.commit()
    conn.close()
    return ledger


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _no_ledger_tables(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize(
    "source, said",
    [
        (lambda d, led: _write(d / "zero.db", b""), "zero.db is empty, not a ledger file; pass the ledger file"),
        (lambda d, led: _write(d / "text.db", b"hello\n"), "text.db is not an ocrr ledger: it is not an SQLite file"),
        (lambda d, led: _no_ledger_tables(d / "other.db"), "other.db is an SQLite file but not an ocrr ledger"),
        (lambda d, led: _damaged(led), "ledger {src} is damaged at entry 4: entry 4: stored hash does not match"),
    ],
    ids=["empty", "text", "other database", "damaged"],
)
def test_migrate_refuses_a_bad_source_by_its_name_and_leaves_no_destination(ledger, tmp_path, capsys, source, said):
    src, new = source(tmp_path, ledger), tmp_path / "out" / "new.db"
    new.parent.mkdir()
    assert main(["ledger", "migrate", str(src), str(new)]) == 2
    err = capsys.readouterr().err
    assert said.format(src=src) in err and str(new) not in err and err.count("\n") == 1, err
    assert list(new.parent.iterdir()) == []
