"""Output paths are checked at the door: a bad one is one clear line and exit 2 before any work,
with nothing created, not a traceback after the experiment has run."""

from __future__ import annotations

import numpy as np
import pytest

import ocrr
from ocrr.cli.main import main

# a tiny synthetic dataset: each run takes a fraction of a second
TINY_RUN = [
    *("--data-option", "n_classes=14", "--data-option", "dim=16"),
    *("--data-option", "n_train_per_class=10", "--data-option", "n_test_per_class=4"),
    *("--systems", "static_knn", "--seeds", "0", "--quiet"),
]


def run_cli(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A working folder holding a plain file, ``afile``, to put outputs under."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder\n")
    return tmp_path


def _ledger(path):
    vectors = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with ocrr.open_substrate(path, "substrate") as substrate:
        substrate.correct(vectors, ["a", "b", "c"], None)
    return path


FOLDER_OUTPUTS = {
    "run": ["run", "--dataset", "synthetic", *TINY_RUN, "--jobs", "1"],
    "sweep": ["sweep", "--datasets", "synthetic", *TINY_RUN, "--jobs", "1"],
    "calibrate-shift": ["calibrate-shift", "--dataset", "synthetic", "--k-max", "4"],
    "scale": ["scale", "--scales", "1000", "--classes", "4", "--dim", "8", "--queries", "10"],
}


@pytest.mark.parametrize("command", FOLDER_OUTPUTS)
@pytest.mark.parametrize("out", ["afile", "afile/results"])
def test_an_output_folder_that_is_or_lies_under_a_file_is_refused_before_any_work(command, out, folder, capsys):
    before = sorted(p.name for p in folder.iterdir())
    assert run_cli(*FOLDER_OUTPUTS[command], "--out", out) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: --out {out}"), captured.err
    assert "afile" in captured.err and "not a folder" in captured.err
    assert len(captured.err.splitlines()) == 1 and captured.out == ""  # no table: nothing ran
    assert sorted(p.name for p in folder.iterdir()) == before


def test_report_refuses_an_output_folder_under_a_file(folder, capsys):
    assert run_cli("run", "--dataset", "synthetic", *TINY_RUN, "--jobs", "1", "--out", "results") == 0
    capsys.readouterr()
    assert run_cli("report", "results", "--out", "afile/report") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out afile/report: afile is a file, not a folder"), err
    assert not (folder / "results" / "report").exists()


@pytest.mark.parametrize("out", ["missing/dir/entries.jsonl", "afile/entries.jsonl", "."])
def test_ledger_export_checks_its_output_file_before_reading_the_ledger(out, folder, capsys):
    ledger = _ledger(folder / "l.db")
    assert run_cli("ledger", "export", ledger, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}"), err
    assert len(err.splitlines()) == 1
    assert not (folder / "missing").exists()


@pytest.mark.parametrize("key", ["missing/dir/k.pem", "afile/k.pem"])
@pytest.mark.parametrize(
    "keygen", [("ledger", "keygen", "--origin", "example.org/log"), ("witness", "keygen", "--name", "w/1")]
)
def test_keygen_checks_where_the_key_goes(keygen, key, folder, capsys):
    assert run_cli(*keygen, key) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {key}"), err
    assert "create it first" in err or "not a folder" in err
    assert not (folder / "missing").exists()


def test_a_good_output_file_is_written(folder, capsys):
    ledger = _ledger(folder / "l.db")
    assert run_cli("ledger", "export", ledger, "--out", "entries.jsonl") == 0
    assert len((folder / "entries.jsonl").read_text().splitlines()) == 4  # a header, then 3 entries


def test_serve_fit_without_an_encoder_is_refused_before_the_ledger_is_made(folder, capsys):
    """--fit demo has texts, so it needs --encoder: refused at the door, with no ledger file left behind."""
    assert run_cli("serve", "--ledger", "x.db", "--fit", "demo", "--port", "0") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --fit demo needs an encoder for its texts; add --encoder minilm"), err
    assert sorted(p.name for p in folder.iterdir()) == ["afile"]
