"""`ocrr ledger …` options checked at the door: an output that would destroy the ledger being read,
a held head given by half or with a negative size, a folder given for a ledger file. Each is one
clear line naming the fix and exit 2, with nothing on disk changed; never a wrong answer."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from ocrr.cli.main import main
from ocrr.ledger.sqlite.store import DurableLedger


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


@pytest.fixture()
def ledger(tmp_path) -> Path:
    path = tmp_path / "l.db"
    rng = np.random.default_rng(0)
    with DurableLedger.open(path) as led:
        for i in range(7):
            led.append(_unit(rng.normal(size=4)), f"c{i % 3}", f"text {i}")
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _run(argv) -> int:
    return main([str(a) for a in argv])


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _head(ledger: Path, capsys) -> dict:
    assert _run(["ledger", "head", ledger]) == 0
    return json.loads(capsys.readouterr().out)


# 1. an output path that is the ledger being read, one of its side files, or another ledger


def test_export_onto_the_ledger_itself_is_refused(ledger, capsys):
    before = _snapshot(ledger.parent)
    assert _run(["ledger", "export", ledger, "--out", ledger]) == 2
    err = _error(capsys)
    assert "is the ledger being read" in err and "write the export elsewhere" in err and "wrote" not in err
    assert _snapshot(ledger.parent) == before
    assert _run(["ledger", "verify", ledger]) == 0  # still the intact ledger


def test_export_onto_the_ledger_by_another_name_is_refused(ledger, tmp_path, capsys, monkeypatch):
    """The same file named relatively, through a link, or through the link's folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.db").symlink_to(ledger)
    (tmp_path / "sub").mkdir()
    before = _snapshot(tmp_path)
    for out in ("l.db", "./sub/../l.db", "link.db", tmp_path / "link.db"):
        assert _run(["ledger", "export", ledger, "--out", out]) == 2, out
        assert "is the ledger being read" in _error(capsys)
    assert _run(["ledger", "export", "link.db", "--out", "l.db"]) == 2
    assert "is the ledger being read" in _error(capsys)
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal", "-writer"])
def test_export_onto_a_side_file_of_the_ledger_is_refused(ledger, capsys, suffix):
    before = _snapshot(ledger.parent)
    out = Path(f"{ledger}{suffix}")
    assert _run(["ledger", "export", ledger, "--out", out]) == 2
    err = _error(capsys)
    assert "side file" in err and "write the export elsewhere" in err
    assert _snapshot(ledger.parent) == before
    assert not out.exists() or out.name in before


def test_export_onto_a_side_file_of_a_linked_ledger_is_refused(ledger, tmp_path, capsys):
    """SQLite keeps the journal of a linked database beside the file the link points to."""
    link = tmp_path / "link.db"
    link.symlink_to(ledger)
    assert _run(["ledger", "export", link, "--out", f"{ledger}-wal"]) == 2
    assert "side file" in _error(capsys)


def test_export_over_another_ledger_is_refused(ledger, tmp_path, capsys):
    other = tmp_path / "other.db"
    other.write_bytes(ledger.read_bytes())
    before = _snapshot(tmp_path)
    assert _run(["ledger", "export", ledger, "--out", other]) == 2
    err = _error(capsys)
    assert f"refusing to overwrite ledger {other} with the export; pick another --out" in err
    assert _snapshot(tmp_path) == before


def test_export_over_an_unrelated_file_still_replaces_it(ledger, tmp_path, capsys):
    out = tmp_path / "old.jsonl"
    out.write_text("an older export\n")
    assert _run(["ledger", "export", ledger, "--out", out]) == 0
    assert "wrote 7 entries" in capsys.readouterr().err
    assert json.loads(out.read_text().splitlines()[0])["size"] == 7


def test_index_onto_the_ledger_is_refused(ledger, tmp_path, capsys):
    key = tmp_path / "k.pem"
    assert _run(["ledger", "keygen", key, "--origin", "example.com/l"]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path)
    for out in (ledger, f"{ledger}-wal"):
        argv = ["ledger", "index", ledger, "--system", "substrate:index=ivf_flat", "--key", key, "--out", out]
        assert _run(argv) == 2
        err = _error(capsys)
        assert "writing the index there would destroy it" in err and "write the index elsewhere" in err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("system", ["static_linear", "blind", "knn_lm"])
def test_index_of_a_system_that_is_no_substrate_is_refused_as_serve_refuses_it(system, ledger, tmp_path, capsys):
    key = tmp_path / "k.pem"
    assert _run(["ledger", "keygen", key, "--origin", "example.com/l"]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path)
    assert _run(["ledger", "index", ledger, "--system", system, "--key", key]) == 2
    err = _error(capsys)
    assert (
        err == f"error: {system!r} is not a substrate; a persistent system needs a ledger (pass substrate, "
        "bounded_fifo_1000, substrate:k=3, ...)\n"
    )
    assert _snapshot(tmp_path) == before


# 2. the head a caller holds: a size of 0 or more, given with its root


def test_verify_refuses_a_negative_expected_size_as_usage(ledger, capsys):
    root = _head(ledger, capsys)["root"]
    with pytest.raises(SystemExit) as usage:
        _run(["ledger", "verify", ledger, "--expect-size", "-1", "--expect-root", root])
    assert usage.value.code == 2
    err = _error(capsys)
    assert "--expect-size" in err and "whole number, 0 or more" in err
    assert capsys.readouterr().out == ""  # no report calling an intact ledger damaged


def test_verify_accepts_an_expected_size_of_zero(ledger, capsys):
    empty_root = hashlib.sha256(b"").hexdigest()
    assert _run(["ledger", "verify", ledger, "--expect-size", "0", "--expect-root", empty_root]) == 0
    assert json.loads(capsys.readouterr().out)["extends_held_head"] is True


def test_verify_refuses_an_expected_root_without_its_size(ledger, capsys):
    root = _head(ledger, capsys)["root"]
    assert _run(["ledger", "verify", ledger, "--expect-root", root]) == 2
    assert "--expect-root and --expect-size go together" in _error(capsys)
    assert capsys.readouterr().out == ""


def test_verify_refuses_an_expected_size_without_its_root_even_when_damaged(ledger, capsys):
    import sqlite3

    conn = sqlite3.connect(ledger)
    conn.execute("UPDATE entries SET text = 'edited' WHERE id = 2")
    conn.commit()
    conn.close()
    assert _run(["ledger", "verify", ledger, "--expect-size", "3"]) == 2
    assert "--expect-root and --expect-size go together" in _error(capsys)


def test_import_refuses_a_negative_expected_size_as_usage(ledger, tmp_path, capsys):
    export = tmp_path / "l.jsonl"
    assert _run(["ledger", "export", ledger, "--out", export]) == 0
    capsys.readouterr()
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as usage:
        _run(["ledger", "import", export, tmp_path / "new.db", "--expect-size", "-1"])
    assert usage.value.code == 2
    assert "whole number, 0 or more" in _error(capsys)
    assert _snapshot(tmp_path) == before


def test_import_still_takes_an_expected_root_alone(ledger, tmp_path, capsys):
    """For import, each of --expect-size and --expect-root is a check of its own (documented so)."""
    export = tmp_path / "l.jsonl"
    assert _run(["ledger", "export", ledger, "--out", export]) == 0
    root = _head(ledger, capsys)["root"]
    assert _run(["ledger", "import", export, tmp_path / "new.db", "--expect-root", root]) == 0


# 3. a folder where a ledger file is expected


@pytest.mark.parametrize(
    "command", [["verify"], ["head"], ["prove", "--entry", "0"], ["consistency", "--from", "1"], ["export"]]
)
def test_a_folder_given_as_the_ledger_is_named_a_directory(ledger, capsys, command):
    name, *rest = command
    assert _run(["ledger", name, ledger.parent, *rest]) == 2
    err = _error(capsys)
    assert f"{ledger.parent} is a directory, not a ledger file" in err and "does not exist" not in err
    assert str(ledger) in err  # the ledger file in it, as the fix


def test_an_empty_folder_given_as_the_ledger_suggests_a_file(tmp_path, capsys):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert _run(["ledger", "verify", folder]) == 2
    err = _error(capsys)
    assert "is a directory, not a ledger file" in err and "ledger file itself" in err


def test_migrate_from_a_folder_is_named_a_directory(ledger, tmp_path, capsys):
    assert _run(["ledger", "migrate", ledger.parent, tmp_path / "new.db"]) == 2
    assert "is a directory, not a ledger file" in _error(capsys)
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("origin", ["", "   ", "with space", "a+b"])
def test_ledger_head_refuses_an_origin_that_is_no_log_name(origin, tmp_path, capsys):
    """An empty --origin signed as the default name (``ledger keygen`` refuses it already)."""
    key = tmp_path / "key"
    assert main(["ledger", "keygen", str(key), "--origin", "example.com/doors"]) == 0
    capsys.readouterr()
    ledger = tmp_path / "l.db"
    with pytest.raises(SystemExit) as usage:
        main(["ledger", "head", str(ledger), "--key", str(key), "--origin", origin])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "is not a log name" in err and "Traceback" not in err
    assert not ledger.exists()
