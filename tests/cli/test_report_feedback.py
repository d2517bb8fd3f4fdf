"""``ocrr report --feedback/--robust/--drift``: the realistic-feedback report's command line
(it was ``python -m ocrr.report.feedback``, which now names this command)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from ocrr.cli.main import main
from ocrr.errors import OcrrError
from ocrr.report import feedback


@pytest.fixture
def robust_sweep(tmp_path):
    """A sweep folder with the robust and plain substrate at two noise rates (hand-made results)."""
    rows = [
        dict(dataset="demo", encoder="minilm", policy=policy, seed=seed, system=system, step=50, corrections=40,
             acc_novel=novel, acc_original=0.9, protocol="heldout")
        for policy, system, seed, novel in [
            ("oracle", "substrate", 0, 0.8),
            ("oracle", "robust_substrate", 0, 0.8),
            ("oracle:noise=0.3", "substrate", 0, 0.5),
            ("oracle:noise=0.3", "robust_substrate", 0, 0.7),
        ]
    ]  # fmt: skip
    folder = tmp_path / "sweep-robust"
    folder.mkdir()
    pd.DataFrame(rows).to_parquet(folder / "results.parquet")
    return folder


def test_the_feedback_report_writes_its_tables(robust_sweep, tmp_path, capsys):
    out = tmp_path / "feedback-report"
    assert main(["report", "--robust", str(robust_sweep), "--out", str(out)]) == 0
    table = (out / "robust-tables.md").read_text()
    assert "noise 0.3" in table and "0.700 / 0.900" in table
    assert str(out / "robust-tables.md") in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["report"], "needs a results folder"),
        (["report", "results", "--drift", "sweep"], "not both"),
        (["report", "--drift", "no-such-sweep"], "--drift no-such-sweep: no such folder"),
    ],
)
def test_a_wrong_feedback_report_command_is_one_line_naming_the_fix(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "docs").exists()


@pytest.mark.parametrize("flag", ["feedback", "drift"])
def test_a_sweep_of_another_kind_is_refused_and_nothing_is_written(flag, robust_sweep, tmp_path, capsys):
    """A folder of another kind (one oracle run) given as the feedback or drift sweep is
    refused before the output folder is touched, even with a right sweep beside it."""
    plain = robust_sweep.parent / "plain"
    plain.mkdir()
    df = pd.read_parquet(robust_sweep / "results.parquet")
    df[df["policy"] == "oracle"].to_parquet(plain / "results.parquet")  # one oracle run: no sweep of either kind
    out = tmp_path / "docs-feedback"
    out.mkdir()
    (out / "noise.png").write_bytes(b"the documented figure")
    assert main(["report", f"--{flag}", str(plain), "--robust", str(robust_sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--{flag} {plain}: this sweep holds no" in err and f"docs/feedback/{flag}.toml" in err
    assert sorted(p.name for p in out.iterdir()) == ["noise.png"]  # the robust tables were not written either
    assert (out / "noise.png").read_bytes() == b"the documented figure"


def test_a_sweep_without_the_robust_runs_is_named_in_plain_words(robust_sweep, tmp_path, capsys):
    plain = robust_sweep.parent / "plain"
    plain.mkdir()
    df = pd.read_parquet(robust_sweep / "results.parquet")
    df[df["system"] == "substrate"].to_parquet(plain / "results.parquet")
    assert main(["report", "--robust", str(plain), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "this sweep holds no runs of the robust_substrate system under label noise;" in err  # was "no the"


def test_the_old_module_command_names_the_new_one():
    old = subprocess.run(
        [sys.executable, "-m", "ocrr.report.feedback", "--robust", "x"], capture_output=True, text=True
    )
    assert old.returncode == 1
    assert "has moved: run `ocrr report --feedback SWEEP" in old.stderr and "Traceback" not in old.stderr
    with pytest.raises(OcrrError, match="ocrr report --feedback"):
        feedback.main([])
