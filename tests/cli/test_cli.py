"""The ocrr command end to end, as a user runs it."""

import json

import pandas as pd
import pytest

from ocrr.cli.main import main


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One embedding cache for the tests that run the real encoder (encoding costs seconds)."""
    return tmp_path_factory.mktemp("shared-cache")


def run_cli(*args):
    return main([str(a) for a in args])


def test_two_runs_give_byte_identical_results(tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert (
            run_cli(
                "run",
                "--dataset",
                "synthetic",
                "--data-option",
                "dim=32",
                "--data-option",
                "sigma=0.05",
                "--seeds",
                "0",
                "1",
                "--quiet",
                "--out",
                out,
            )
            == 0
        )
        outs.append(out)
    for file in (
        "per_checkpoint.csv",
        "summary.csv",
        "summary.md",
        "config.json",
        "metrics.parquet",
        "predictions.parquet",
    ):
        assert (outs[0] / file).read_bytes() == (outs[1] / file).read_bytes(), file


def test_run_writes_the_documented_files(tmp_path):
    out = tmp_path / "r"
    assert (
        run_cli(
            "run",
            "--dataset",
            "synthetic",
            "--data-option",
            "dim=32",
            "--data-option",
            "sigma=0.05",
            "--seeds",
            "0",
            "--systems",
            "substrate,online_linear",
            "--policy",
            "random50",
            "--quiet",
            "--out",
            out,
        )
        == 0
    )
    per = pd.read_csv(out / "per_checkpoint.csv")
    assert list(per.columns) == [
        "dataset",
        "encoder",
        "policy",
        "seed",
        "system",
        "step",
        "corrections",
        "acc_novel",
        "acc_original",
        "online_accuracy",
        "episode",
    ]
    # every stream prediction, one row per stream item of each run
    preds = pd.read_parquet(out / "predictions.parquet")
    assert list(preds.columns) == [
        "episode",
        "step",
        "item",
        "label",
        "predicted",
        "corrected",
        "dataset",
        "encoder",
        "policy",
        "seed",
        "system",
    ]
    last = per.groupby("system").tail(1).set_index("system")
    assert preds.groupby("system").size().to_dict() == last["step"].to_dict()
    assert preds.groupby("system")["corrected"].sum().to_dict() == last["corrections"].to_dict()
    right = (preds["label"] == preds["predicted"]).groupby(preds["system"]).mean()
    assert right.round(6).to_dict() == last["online_accuracy"].round(6).to_dict()
    assert set(per["system"]) == {"substrate", "online_linear"} and set(per["policy"]) == {"random50"}
    steps = per[per.system == "substrate"]["step"].tolist()
    assert steps[0] == 0 and all(b - a == 50 for a, b in zip(steps[:-2], steps[1:-1]))
    timings = pd.read_csv(out / "timings.csv")
    assert {"predict_seconds", "correct_seconds"} <= set(timings.columns)
    summary = pd.read_csv(out / "summary.csv")
    for col in (
        "n_seeds",
        "final_novel_mean",
        "final_novel_std",
        "final_original_mean",
        "final_original_std",
        "corrections_to_10_mean",
        "corrections_to_10_reached",
        "corrections_to_70_reached",
        "footprint_entries",
        "footprint_bytes",
    ):
        assert col in summary.columns
    config = json.loads((out / "config.json").read_text())
    assert config["systems"]["substrate"]["k"] == 5 and config["systems"]["online_linear"]["lr"] == 0.05
    assert len(config["embeddings"]["sha256"]) == 64
    # the substrate learned: its last checkpoint beats its first on novel accuracy
    sub = per[per.system == "substrate"]
    assert sub["acc_novel"].iloc[-1] > sub["acc_novel"].iloc[0] + 0.5


def test_offline_without_data_names_the_url_and_both_fixes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OCRR_DATA_DIR", raising=False)  # CI points it at the real data
    assert run_cli("run", "--dataset", "banking77", "--quiet", "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert "raw.githubusercontent.com/PolyAI-LDN" in err
    assert "--data-dir" in err and "OCRR_DATA_DIR" in err


def test_unknown_system_fails_before_any_work(tmp_path, capsys):
    assert run_cli("run", "--dataset", "synthetic", "--systems", "substrate,sbustrate", "--out", tmp_path) == 2
    err = capsys.readouterr().err
    assert "unknown system 'sbustrate'" in err and "ocrr systems" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--systems", "substrate:k=-3"], "system 'substrate:k=-3': k must be at least 1"),
        (["--every", "0"], "option every=0 must be a whole number >= 1"),
        (["--eval-cap", "-1"], "option eval_cap=-1 must be a whole number >= 0"),
        (["--protocol", "heldout:every=0"], "option every=0 must be a whole number >= 1"),
        (["--protocol", "heldout:evry=5"], "protocol heldout has no option evry"),
        (["--protocol", "heldot"], "unknown protocol 'heldot'. Did you mean heldout?"),
        (["--encoder", "precomputed:vectors.npy"], "synthetic carries its own vectors"),
        (["--seeds", "-1"], "seeds must be whole numbers >= 0"),
    ],
)
def test_bad_options_end_in_one_clear_error(args, message, tmp_path, capsys):
    assert run_cli("run", "--dataset", "synthetic", "--quiet", "--out", tmp_path / "r", *args) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # failed at the door, before any work


def test_sweep_rejects_bad_jobs(tmp_path, capsys):
    assert run_cli("sweep", "--preset", "smoke", "--jobs", "0", "--out", tmp_path) == 2
    assert "--jobs 0: give a whole number of workers >= 1" in " ".join(capsys.readouterr().err.split())


def test_protocols_lists_the_registry(capsys):
    assert run_cli("protocols") == 0
    out = capsys.readouterr().out
    assert "heldout" in out and "every=50" in out and "acc_novel" in out


def test_systems_lists_the_registry(capsys):
    assert run_cli("systems") == 0
    out = capsys.readouterr().out
    for name in ("substrate", "static_knn", "static_linear", "online_linear"):
        assert name in out
    assert "margin=0.05" in out


def test_fallback_runs_the_demo_with_the_real_encoder_and_says_so(tmp_path, capsys, monkeypatch, shared_cache):
    monkeypatch.setenv("OCRR_CACHE_DIR", str(shared_cache))
    monkeypatch.delenv("OCRR_DATA_DIR", raising=False)  # CI points it at the real data
    out = tmp_path / "r"
    assert run_cli("run", "--dataset", "banking77", "--fallback-demo", "--seeds", "0", "--quiet", "--out", out) == 0
    printed = capsys.readouterr().out
    assert "RUNNING ON DEMO DATA" in printed and "--data-dir" in printed
    assert printed.count("Fix") == 1  # the fix is said once
    summary = pd.read_csv(out / "summary.csv").set_index("system")
    assert set(summary["dataset"]) == {"demo"} and set(summary["encoder"]) == {"minilm"}
    # real text through the real encoder: the substrate learns the held-out intents
    assert summary.loc["substrate", "final_novel_mean"] > 0.6
    assert summary.loc["static_knn", "final_novel_mean"] == 0.0


def test_embed_fills_the_cache_then_reuses_it(capsys, monkeypatch, shared_cache):
    monkeypatch.setenv("OCRR_CACHE_DIR", str(shared_cache))
    assert run_cli("embed", "--dataset", "demo") == 0
    assert run_cli("embed", "--dataset", "demo") == 0
    out = capsys.readouterr().out
    assert "(cache)" in out and "dimension 384" in out


def test_user_csv_end_to_end(tmp_path, monkeypatch, shared_cache):
    monkeypatch.setenv("OCRR_CACHE_DIR", str(shared_cache))
    rows = []
    topics = {
        "refund": "I want my money back for order {}",
        "late": "my parcel {} has not arrived yet",
        "login": "cannot sign in to account {}",
        "invoice": "please send invoice number {}",
    }
    for label, template in topics.items():
        rows += [{"utterance": template.format(i), "intent": label} for i in range(15)]
    pd.DataFrame(rows).to_csv(tmp_path / "mine.csv", index=False)
    out = tmp_path / "r"
    assert (
        run_cli(
            "run",
            "--dataset",
            f"csv:{tmp_path / 'mine.csv'}",
            "--text-col",
            "utterance",
            "--label-col",
            "intent",
            "--heldout",
            "2",
            "--seeds",
            "0",
            "--every",
            "5",
            "--systems",
            "substrate",
            "--quiet",
            "--out",
            out,
        )
        == 0
    )
    per = pd.read_csv(out / "per_checkpoint.csv")
    assert per["acc_novel"].iloc[-1] == 1.0
