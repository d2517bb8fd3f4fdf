"""``--track mlflow``: ``ocrr run`` and ``ocrr sweep`` logged to a real, local MLflow store (offline),
read back with ``MlflowClient``; the results files are the same with or without tracking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import ocrr
from ocrr.cli.main import main

RUN_SYSTEMS = ["static_knn", "substrate"]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One store; the demo set encoded once; ``ocrr run`` with and without --track, and a tiny
    sweep on two worker processes, tracked."""
    pytest.importorskip("mlflow", reason="pip install -e '.[tracking]'")
    root = tmp_path_factory.mktemp("tracking")
    store = root / "mlruns"
    run = ["run", "--dataset", "demo", "--seeds", "0", "--systems", *RUN_SYSTEMS, "--jobs", "1", "--quiet"]
    sweep = ["sweep", "--datasets", "demo", "--seeds", "0", "1", "--systems", "static_knn", "--quiet"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OCRR_CACHE_DIR", str(root / "cache"))
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
        assert main([*run, "--out", str(root / "plain")]) == 0
        assert main([*run, "--out", str(root / "run-tracked"), "--track", f"mlflow:{store}"]) == 0
        assert main([*sweep, "--jobs", "2", "--out", str(root / "sweep-tracked"), "--track", f"mlflow:{store}"]) == 0
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    return root, client, client.get_experiment_by_name("ocrr").experiment_id


def _parent_and_children(client, experiment_id: str, name: str):
    runs = client.search_runs([experiment_id], max_results=1000)
    (parent,) = [r for r in runs if r.info.run_name == name]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, sorted(children, key=lambda r: (r.data.params["system"], int(r.data.params["seed"])))


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    return {a.path for a in client.list_artifacts(run_id, path)}


@pytest.mark.slow
def test_a_tracked_run_is_a_parent_with_one_child_per_system_and_seed(tracked):
    root, client, experiment_id = tracked
    parent, children = _parent_and_children(client, experiment_id, "run-tracked")
    assert parent.info.status == "FINISHED"
    assert parent.data.params["command"] == "ocrr run" and parent.data.params["dataset"] == "demo"
    assert [c.data.params["system"] for c in children] == RUN_SYSTEMS
    assert all(c.info.status == "FINISHED" for c in children)
    # artifacts: the summary, the config and the report
    assert {"summary.csv", "summary.md", "config.json", "per_checkpoint.csv", "report"} <= _artifacts(
        client, parent.info.run_id
    )
    assert "report/report.html" in _artifacts(client, parent.info.run_id, "report")
    local = Path(client.download_artifacts(parent.info.run_id, "summary.md", str(root)))
    assert local.read_bytes() == (root / "run-tracked" / "summary.md").read_bytes()


@pytest.mark.slow
def test_each_run_s_params_name_its_configuration_and_the_hashes_of_its_data(tracked):
    root, client, experiment_id = tracked
    _, children = _parent_and_children(client, experiment_id, "run-tracked")
    config = json.loads((root / "run-tracked" / "config.json").read_text())
    substrate = children[1].data.params
    assert substrate["system"] == "substrate" and substrate["seed"] == "0" and substrate["policy"] == "oracle"
    assert substrate["protocol"].startswith("heldout:")
    assert substrate["hp.k"] == str(config["systems"]["substrate"]["k"])
    assert substrate["embedding_sha256"] == config["embeddings"]["sha256"]
    assert json.loads(substrate["dataset_files_sha256"]) == config["dataset"]["files"]


@pytest.mark.slow
def test_every_checkpoint_is_logged_with_the_corrections_so_far_as_its_step(tracked):
    root, client, experiment_id = tracked
    _, children = _parent_and_children(client, experiment_id, "run-tracked")
    table = pd.read_csv(root / "run-tracked" / "per_checkpoint.csv")
    footprints = pd.read_csv(root / "run-tracked" / "footprints.csv")
    for child in children:
        rows = table[table["system"] == child.data.params["system"]]
        history = {name: client.get_metric_history(child.info.run_id, name) for name in ("items_seen", "acc_novel")}
        items = sorted(zip(rows["corrections"], rows["step"]))
        assert sorted((m.step, m.value) for m in history["items_seen"]) == items
        logged = sorted((m.step, m.value) for m in history["acc_novel"])
        expected = sorted(zip(rows["corrections"], rows["acc_novel"]))
        assert [step for step, _ in logged] == [step for step, _ in expected]
        assert [value for _, value in logged] == pytest.approx([value for _, value in expected], abs=1e-6)
        footprint = client.get_metric_history(child.info.run_id, "footprint_entries")
        entries = footprints.loc[footprints["system"] == child.data.params["system"], "footprint_entries"]
        assert [(m.step, m.value) for m in footprint] == [(rows["corrections"].max(), entries.item())]


@pytest.mark.slow
def test_the_results_files_are_the_same_with_or_without_tracking(tracked):
    root, _, _ = tracked
    plain, tracked_out = root / "plain", root / "run-tracked"
    names = sorted(p.name for p in plain.iterdir())
    assert names == sorted(p.name for p in tracked_out.iterdir())
    for name in names:
        if name != "timings.csv":  # wall-clock seconds: never the same twice
            assert (plain / name).read_bytes() == (tracked_out / name).read_bytes(), name


@pytest.mark.slow
def test_a_tracked_sweep_is_a_parent_with_one_child_per_run_logged_from_worker_processes(tracked):
    root, client, experiment_id = tracked
    parent, children = _parent_and_children(client, experiment_id, "sweep-tracked")
    assert parent.info.status == "FINISHED" and parent.data.params["command"] == "ocrr sweep"
    assert [(c.data.params["system"], c.data.params["seed"]) for c in children] == [
        ("static_knn", "0"),
        ("static_knn", "1"),
    ]
    results = pd.read_csv(root / "sweep-tracked" / "results.csv")
    assert {c.data.params["task_id"] for c in children} == set(results["task_id"])
    for child in children:
        assert child.info.status == "FINISHED"
        history = client.get_metric_history(child.info.run_id, "acc_original")
        assert len(history) == (results["task_id"] == child.data.params["task_id"]).sum()
    assert {"results.csv", "sweep.json", "report"} <= _artifacts(client, parent.info.run_id)


def test_a_failed_run_is_logged_failed_with_its_error(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="pip install -e '.[tracking]'")
    from mlflow import MlflowClient

    from ocrr.engine.tracking import open_tracker, parent_run

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "failures")
    with parent_run(open_tracker(f"mlflow:{tmp_path}"), "parent", {"command": "test"}) as tracker:
        assert tracker is not None
        tracker.run_started("t1", "broken", {"system": "broken", "seed": 0})
        tracker.checkpoint("t1", 0, {"acc_novel": 0.0})
        tracker.run_ended("t1", error="ValueError: the system broke")
        tracker.run_started("t2", "left open", {"system": "interrupted", "seed": 0})
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("failures").experiment_id])}
    assert runs["parent"].info.status == "FINISHED"
    assert runs["broken"].info.status == "FAILED"
    assert runs["broken"].data.tags["ocrr.error"] == "ValueError: the system broke"
    assert runs["broken"].data.metrics == {"acc_novel": 0.0}
    assert runs["left open"].info.status == "FAILED"  # never ended: not left RUNNING


@pytest.mark.parametrize(
    ("track", "says"),
    [
        ("wandb", "unknown tracker 'wandb'. Use --track mlflow"),
        ("mlflow:{file}", "is a file, not a folder"),
        ("mlflow:", "names no store after the colon"),
        ("mlflow:http://127.0.0.1:{closed}", "no tracking server answers at 127.0.0.1:"),
    ],
)
def test_a_bad_track_option_fails_at_the_door_in_one_line(tmp_path, capsys, track, says):
    import socket

    if track.startswith("mlflow"):
        pytest.importorskip("mlflow", reason="pip install -e '.[tracking]'")
    (tmp_path / "file").write_text("")
    out = tmp_path / "out"
    with socket.socket() as s:  # a port nothing listens on (MLflow would retry it for minutes)
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    argv = ["run", "--dataset", "demo", "--jobs", "1", "--quiet", "--out", str(out)]
    assert main([*argv, "--track", track.format(file=tmp_path / "file", closed=closed)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()  # nothing ran


def test_without_mlflow_track_fails_at_the_door_naming_the_install(tmp_path):
    """As on a machine without the extra: importing mlflow fails (None in sys.modules)."""
    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "from ocrr.cli.main import main\n"
        f"sys.exit(main(['sweep', '--datasets', 'demo', '--seeds', '0', '--systems', 'static_knn', '--jobs', '1', "
        f"'--out', {str(tmp_path / 'out')!r}, '--track', 'mlflow']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(ocrr.__file__).parents[1])}  # this ocrr, from any folder
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: --track mlflow needs MLflow, which is not installed: pip install -e '.[tracking]'"
    ]
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlruns").exists()
