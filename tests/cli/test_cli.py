"""The ocrr command end to end, as a user runs it."""

import json
import re
import subprocess
import sys

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
        (["--systems", "substrate:k=-3"], "system substrate: k must be an integer in [1, 100000], got -3"),
        (["--every", "0"], "protocol heldout: every must be an integer ≥ 1, got 0"),
        (["--eval-cap", "-1"], "protocol heldout: eval_cap must be an integer ≥ 0, got -1"),
        (["--protocol", "heldout:every=0"], "protocol heldout: every must be an integer ≥ 1, got 0"),
        (["--protocol", "heldout:evry=5"], "protocol heldout has no option evry"),
        (["--protocol", "heldot"], "unknown protocol 'heldot'. Did you mean heldout?"),
        (["--encoder", "precomputed:vectors.npy"], "synthetic carries its own vectors"),
        (["--seeds", "-1"], "seeds must be whole numbers >= 0"),
    ],
)
def test_bad_options_end_in_one_clear_error(args, message, tmp_path, capsys):
    assert run_cli("run", "--dataset", "synthetic", "--quiet", "--out", tmp_path / "r", *args) == 2
    err = " ".join(capsys.readouterr().err.split())
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
    assert "margin=0.05" not in out  # the short list: no hyperparameters
    assert run_cli("systems", "--all") == 0
    assert "margin=0.05" in capsys.readouterr().out


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


@pytest.mark.parametrize("spec", ["banking7", "leyzer:lang=xx-XX", "banking77:nosuch=1"])
def test_fallback_is_no_way_around_a_misspelt_dataset(tmp_path, capsys, spec):
    """--fallback-demo stands in for data that cannot be had, not for a name or option that is
    wrong whatever files there are: those are refused as without it, and nothing runs."""
    out = tmp_path / "r"
    assert run_cli("run", "--dataset", spec, "--fallback-demo", "--seeds", "0", "--quiet", "--out", out) == 2
    printed = capsys.readouterr()
    assert "RUNNING ON DEMO DATA" not in printed.out + printed.err and not out.exists()


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


# Every command and flag of `ocrr` before cli/ was split into one module per command
# (taken from `ocrr <command> -h`); a command or flag may be added, none may go.
COMMAND_OPTIONS = {
    "": "run embed systems protocols sweep report scale calibrate-shift ledger serve -h --help",
    "run": "-h --help --dataset --data-dir --no-oos --text-col --label-col --test-fraction --data-option --encoder "
    "--protocol --policy --seeds --systems --heldout --eval-cap --every --out --fallback-demo --quiet",
    "embed": "-h --help --dataset --data-dir --no-oos --text-col --label-col --test-fraction --data-option --encoder",
    "systems": "-h --help --all",
    "protocols": "-h --help",
    "sweep": "-h --help --preset --config --datasets --policies --seeds --systems --encoders --protocol --protocols "
    "--heldout --eval-cap --every --data-dir --data-option --no-oos --executor --jobs --address --out --dry-run "
    "--report --quiet",
    "report": "results -h --help --out",
    "scale": "-h --help --scales --family --intrinsic-dim --ambient --sigma --classes --dim --queries --query-modes "
    "--backends --exact --exact-max-gb --hnsw-m --ef-construction --ef-search --nlist --target-recall "
    "--target-agreement --tune-queries --tune-tolerance --cold-queries --also-time --nprobe --rerank --vectors-dir "
    "--order --real --data-dir --seed --threads --out --no-isolate",
    "calibrate-shift": "-h --help --dataset --data-dir --protocol --seeds --k-max --s-max --out",
    "ledger": "verify head prove consistency export import keygen -h --help",
    "ledger verify": "path -h --help --quick --expect-size --expect-root",
    "ledger head": "path -h --help --key --origin --checkpoint",
    "ledger prove": "path -h --help --entry --size",
    "ledger consistency": "path -h --help --from --to",
    "ledger export": "path -h --help --out",
    "ledger import": "jsonl path -h --help",
    "ledger keygen": "key -h --help --origin",
    "serve": "-h --help --ledger --system --seed --encoder --encoder-nice --fit --data-dir --host --port "
    "--token-file --key --origin --quick-open --workers",
}


def listed_options(help_text: str) -> list[str]:
    """Subcommands, positionals and flags an argparse help text lists, in order."""
    section, names = "", []
    for line in help_text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
            continue
        head = re.match(r"^  (\S.*?)(?:\s{2,}|$)", line)
        if not head:
            continue
        if section == "options":
            names += re.findall(r"(?:^|, )(-{1,2}[\w-]+)", head.group(1))
        elif section == "positional arguments":
            choices = re.fullmatch(r"\{(.*)\}", head.group(1))
            names += choices.group(1).split(",") if choices else [head.group(1).split()[0]]
    return names


@pytest.mark.parametrize("command", list(COMMAND_OPTIONS))
def test_every_command_help_lists_its_options(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        main([*command.split(), "-h"])
    assert done.value.code == 0
    listed = listed_options(capsys.readouterr().out)
    missing = [name for name in COMMAND_OPTIONS[command].split() if name not in listed]
    assert not missing, f"ocrr {command} -h no longer lists {missing}"


def test_python_dash_m_runs_the_same_command():
    done = subprocess.run([sys.executable, "-m", "ocrr.cli", "protocols", "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage: ocrr protocols" in done.stdout


def test_an_error_is_one_unwrapped_line_printed_as_written(tmp_path, capsys):
    folder = tmp_path / ("a-long-folder-name-that-must-stay-whole-" * 4) / "[not-markup]"
    assert run_cli("scale", "--vectors-dir", folder, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(folder) in err  # a path (or URL) stays whole, brackets and all
