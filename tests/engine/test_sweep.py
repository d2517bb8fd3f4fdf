"""ocrr sweep: grid expansion and task keys, resume after an interrupt, executors that agree."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import ocrr.engine.sweep as sweep
import ocrr.engine.sweep.executors as executors
from ocrr.cli.main import main
from ocrr.engine.sweep import Grid, Task, load_config, read_log, resolve_grid, run_sweep
from ocrr.errors import OcrrError
from ocrr.report.load import load_results_any

SMOKE = dict(preset="smoke")


def done_ids(out, since=0):
    """Task ids the execution log says finished, in invocations from number ``since`` on."""
    starts, ids = -1, []
    for record in read_log(out):
        if record["event"] == "start":
            starts += 1
        elif record["event"] == "done" and starts >= since:
            ids.append(record["task_id"])
    return ids


# --- the grid ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "preset, n, systems",
    [("main", 180, 10), ("river", 36, 3), ("storage", 27, 9), ("ablation", 15, 5), ("ocl", 24, 8), ("smoke", 8, 2)],
)
def test_presets_expand_to_the_papers_grids(preset, n, systems):
    tasks = resolve_grid(preset).tasks(resolve=False)
    assert len(tasks) == n
    assert len({t.task_id for t in tasks}) == n  # keys unique
    assert len({t.system for t in tasks}) == systems
    assert {t.seed for t in tasks} == ({0, 1} if preset == "smoke" else {0, 1, 2})


def test_main_preset_is_the_papers_5_1_grid_without_lora():
    grid = resolve_grid("main")
    assert grid.datasets == ["banking77", "clinc150"]
    assert grid.policies == ["oracle", "random50", "random10"]
    # the paper's nine systems (162 runs) and ocrr's consolidating memory; the fair river variants
    # have their own preset
    assert grid.systems == [
        "substrate",
        "static_knn",
        "static_linear",
        "online_linear",
        "ewc",
        "a_gem",
        "lwf",
        "knn_lm",
        "river_logreg",
        "consolidating",
    ]
    # asked for explicitly, LoRA joins the preset's systems
    assert resolve_grid("main", systems=["+lora_deberta"]).systems[-1] == "lora_deberta"
    assert resolve_grid("storage").systems == sweep.STORAGE_SYSTEMS
    assert "bounded_fifo_5000" in sweep.STORAGE_SYSTEMS and "bounded_reservoir_100" in sweep.STORAGE_SYSTEMS


HELDOUT = "heldout:eval_cap=400:every=50:n_heldout=10"


def test_task_ids_are_stable_across_processes():
    task = Task("synthetic", '{"dim":16}', "dataset", HELDOUT, "oracle", 0, "substrate:k=3", '{"k":3}')
    # a golden value: changes only if the task's canonical form changes (then bump TASK_SCHEMA)
    assert task.task_id == "02c8e0199335c17f48fe"
    # the protocol's options are canonical: defaults spelled out or not, the same task
    assert (
        Task("synthetic", '{"dim":16}', "dataset", "heldout", "oracle", 0, "substrate:k=3", '{"k":3}').task_id
        == task.task_id
    )
    code = (
        "from ocrr.engine.sweep import Task; print(Task('synthetic', '{\"dim\":16}', 'dataset', 'heldout', "
        "'oracle', 0, 'substrate:k=3', '{\"k\":3}').task_id)"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == task.task_id


def test_every_configuration_field_is_part_of_the_key():
    base = Grid(datasets=["synthetic"], policies=["oracle"], seeds=[0], systems=["substrate"], data_options={"dim": 16})
    ids = {base.tasks()[0].task_id}
    for change in (
        dict(seeds=[1]),
        dict(policies=["random50"]),
        dict(systems=["substrate:k=3"]),
        dict(systems=["online_linear"]),
        dict(data_options={"dim": 8}),
        dict(n_heldout=5),
        dict(eval_cap=100),
        dict(every=25),
        dict(datasets=["demo"]),
        dict(overrides={"substrate": {"k": 2}}),
        dict(protocols=["heldout:every=10"]),
    ):
        grid = Grid(**{**base.__dict__, **change})
        ids.add(grid.tasks()[0].task_id)
    assert len(ids) == 12
    # a shortcut and the protocol option it stands for are the same task
    assert (
        Grid(**{**base.__dict__, "every": 10}).tasks()[0].task_id
        == Grid(**{**base.__dict__, "protocols": ["heldout:every=10"]}).tasks()[0].task_id
    )


def test_equivalent_specs_share_one_key():
    a = Grid(datasets=["synthetic"], seeds=[0], systems=["substrate:margin=0.10:k=3"]).tasks()
    b = Grid(datasets=["synthetic"], seeds=[0], systems=["substrate:k=3:margin=0.1"]).tasks()
    c = Grid(
        datasets=["synthetic"], seeds=[0], systems=["substrate"], overrides={"substrate": {"k": 3, "margin": 0.1}}
    ).tasks()
    assert a[0].task_id == b[0].task_id == c[0].task_id
    assert a[0].system == "substrate:k=3:margin=0.1"
    # a resolved default is part of the key: the record says exactly what ran
    assert json.loads(a[0].hyperparameters)["k"] == 3
    # the same run listed twice is one task
    assert len(Grid(datasets=["synthetic"], seeds=[0, 0], systems=["substrate", "substrate"]).tasks()) == 1


def test_config_files_toml_and_json_give_the_same_grid(tmp_path):
    (tmp_path / "g.toml").write_text(
        'preset = "smoke"\n[sweep]\nseeds = [3]\nsystems = ["substrate", "static_knn"]\n'
        "[sweep.data_options.synthetic]\nn_classes = 16\n[sweep.overrides.substrate]\nk = 3\n"
    )
    (tmp_path / "g.json").write_text(
        json.dumps(
            {
                "preset": "smoke",
                "seeds": [3],
                "systems": ["substrate", "static_knn"],
                "data_options": {"synthetic": {"n_classes": 16}},
                "overrides": {"substrate": {"k": 3}},
            }
        )
    )
    grids = [resolve_grid(config=load_config(tmp_path / name)) for name in ("g.toml", "g.json")]
    assert [t.task_id for t in grids[0].tasks()] == [t.task_id for t in grids[1].tasks()]
    tasks = grids[0].tasks()
    assert {t.system for t in tasks} == {"substrate:k=3", "static_knn"} and {t.seed for t in tasks} == {3}
    assert json.loads(tasks[0].data_options)["n_classes"] == 16 and json.loads(tasks[0].data_options)["dim"] == 16


def test_config_and_grid_errors_name_the_fix(tmp_path):
    (tmp_path / "bad.toml").write_text("sedes = [1]\n")
    with pytest.raises(OcrrError, match="unknown setting.*sedes.*Known"):
        load_config(tmp_path / "bad.toml")
    (tmp_path / "broken.json").write_text("{seeds: [1]")
    with pytest.raises(OcrrError, match="cannot parse"):
        load_config(tmp_path / "broken.json")
    with pytest.raises(OcrrError, match="unknown sweep preset 'mian'"):
        resolve_grid("mian")
    with pytest.raises(OcrrError, match="unknown system 'sbustrate'"):
        Grid(datasets=["synthetic"], systems=["sbustrate"]).tasks()
    with pytest.raises(OcrrError, match="non-empty list"):
        Grid(datasets=["synthetic"], seeds=[]).tasks()


# --- running, resuming --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory):
    """The smoke grid once, in-process: the reference the other tests compare with."""
    out = tmp_path_factory.mktemp("serial")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OCRR_CACHE_DIR", str(tmp_path_factory.mktemp("serial-cache")))
        result = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    return out, result


def test_sweep_writes_one_tidy_table_with_every_configuration_column(serial_run):
    out, result = serial_run
    assert len(result.ran) == 8 and not result.failed
    table = pd.read_parquet(out / "results.parquet")
    columns = [
        "task_id",
        "dataset",
        "data_options",
        "encoder",
        "protocol",
        "protocol_options",
        "n_heldout",
        "eval_cap",
        "every",
        "policy",
        "system",
        "seed",
        "system_name",
        "overrides",
        "hyperparameters",
        "step",
        "corrections",
        "acc_novel",
        "acc_original",
        "footprint_entries",
        "footprint_params",
        "footprint_bytes",
        "online_accuracy",
        "episode",
    ]
    assert list(table.columns) == columns
    assert table["task_id"].nunique() == 8 and not table.duplicated(["task_id", "step"]).any()
    assert set(table["protocol"]) == {"heldout"} and set(table["every"]) == {50}
    # the long table holds the same numbers, one row per (task, step, metric)
    long = pd.read_parquet(out / "metrics.parquet")
    novel = long[long["metric"] == "acc_novel"].set_index(["task_id", "step"])["value"]
    assert (
        table.set_index(["task_id", "step"])["acc_novel"] == novel.loc[table.set_index(["task_id", "step"]).index]
    ).all()
    # every stream prediction, one row per stream item of every task
    preds = pd.read_parquet(out / "predictions.parquet")
    last = table.sort_values("step").groupby("task_id").tail(1).set_index("task_id")
    assert preds.groupby("task_id").size().to_dict() == last["step"].to_dict()
    assert preds.groupby("task_id")["corrected"].sum().to_dict() == last["corrections"].to_dict()
    assert set(table["policy"]) == {"oracle", "random50"} and set(table["system"]) == {"substrate", "online_linear"}
    assert (table["step"] == 0).sum() == 8  # one row per run x checkpoint, starting at step 0
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == len(table) and list(csv.columns) == columns
    assert len(list((out / "tasks").glob("*.parquet"))) == 8
    assert set(pd.read_csv(out / "timings.csv")["task_id"]) == set(table["task_id"])
    manifest = json.loads((out / "sweep.json").read_text())
    assert set(manifest["tasks"]) == set(table["task_id"])


def test_sweep_rows_equal_ocrr_run_rows(serial_run, tmp_path):
    """A task is the same computation as the matching part of `ocrr run`."""
    out, _ = serial_run
    opts = sweep.SMOKE_DATA
    args = [
        "run",
        "--dataset",
        "synthetic",
        "--seeds",
        "0",
        "1",
        "--systems",
        "substrate",
        "online_linear",
        "--policy",
        "random50",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
    ]
    for key, value in opts.items():
        args += ["--data-option", f"{key}={value}"]
    assert main(args) == 0
    run = pd.read_csv(tmp_path / "run" / "per_checkpoint.csv")
    swept = pd.read_csv(out / "results.csv")
    swept = swept[swept["policy"] == "random50"]
    keys = ["system", "seed", "step"]
    merged = run.merge(swept, on=keys, suffixes=("_run", "_sweep"))
    assert len(merged) == len(run) == len(swept)
    for col in ("corrections", "acc_novel", "acc_original"):
        assert (merged[f"{col}_run"] == merged[f"{col}_sweep"]).all(), col


def test_rerun_skips_everything_finished(serial_run, tmp_path):
    out, _ = serial_run
    before = (out / "results.csv").read_bytes()
    again = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    assert len(again.skipped) == 8 and not again.ran
    assert (out / "results.csv").read_bytes() == before


def test_interrupted_sweep_resumes_without_redoing_or_duplicating(serial_run, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    real = executors.execute_task
    calls = []

    def crash_on_fourth(task, shared, vecs=None, on_checkpoint=None):
        calls.append(task.task_id)
        if len(calls) == 4:
            raise KeyboardInterrupt  # as Ctrl-C (or a kill) in the middle of the grid
        return real(task, shared, vecs)

    monkeypatch.setattr(executors, "execute_task", crash_on_fourth)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    first = done_ids(out)
    assert len(first) == 3 and len(list((out / "tasks").glob("*.parquet"))) == 3
    assert len(pd.read_parquet(out / "results.parquet")["task_id"].unique()) == 3  # consolidated on interrupt

    monkeypatch.setattr(executors, "execute_task", real)
    resumed = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    second = done_ids(out, since=1)
    all_ids = {t.task_id for t in resumed.tasks}
    assert len(resumed.skipped) == 3 and set(second) == all_ids - set(first) and len(second) == 5
    table = pd.read_csv(out / "results.csv")
    assert not table.duplicated(["task_id", "step"]).any() and set(table["task_id"]) == all_ids
    # and the resumed table is exactly the uninterrupted one
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()


def test_a_lost_task_file_is_the_only_run_redone(serial_run, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(serial_run[0], out)
    files = sorted((out / "tasks").glob("*.parquet"))
    mtimes = {p.name: p.stat().st_mtime_ns for p in files}
    files[2].unlink()
    result = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    assert [t.task_id for t in result.ran] == [files[2].stem]
    changed = [p.name for p in sorted((out / "tasks").glob("*.parquet")) if p.stat().st_mtime_ns != mtimes[p.name]]
    assert changed == [files[2].name]
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()


class Notices(sweep.Progress):
    def __init__(self):
        self.said: list[str] = []

    def notice(self, text: str) -> None:
        self.said.append(text)


@pytest.mark.parametrize("folder", ["tasks", "predictions"])
@pytest.mark.parametrize("damage", [b"", b"garbage bytes\n", "cut"])
def test_a_damaged_task_file_is_run_again_saying_so(serial_run, tmp_path, folder, damage):
    """A task file that cannot be read (empty, garbage, cut short) stopped the resume and the
    report with an ArrowInvalid: its task is not finished, so it runs again, and it is said."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(serial_run[0], out)
    victim = sorted((out / folder).glob("*.parquet"))[1]
    whole = victim.read_bytes()
    victim.write_bytes(whole[: len(whole) // 2] if damage == "cut" else damage)
    with pytest.raises(OcrrError, match=rf"{victim} cannot be read .*Run the sweep that made {out} again"):
        load_results_any(out) if folder == "tasks" else sweep.consolidate(out)
    progress = Notices()
    result = run_sweep(resolve_grid(**SMOKE), out, executor="serial", progress=progress)
    assert [t.task_id for t in result.ran] == [victim.stem] and not result.failed
    assert len(progress.said) == 1 and progress.said[0].startswith(f"{victim} cannot be read (")
    assert progress.said[0].endswith("): its task's files are removed and it runs again.")
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()
    assert load_results_any(out).source == "sweep"


def test_a_damaged_task_file_is_said_on_stderr_by_the_command(serial_run, tmp_path, capsys):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(serial_run[0], out)
    victim = sorted((out / "tasks").glob("*.parquet"))[0]
    victim.write_bytes(b"garbage")
    args = ["sweep", "--preset", "smoke", "--executor", "serial", "--quiet", "--out", str(out)]
    assert main([*args, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"warning: {victim} cannot be read (")
    assert "the run would remove its task's files and run it again" in captured.err
    assert "7 already done" in captured.out and "1 to run" in captured.out
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith(f"warning: {victim} cannot be read (") and "1 ran, 0 failed" in captured.out
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()


def test_a_damaged_task_file_of_a_run_outside_the_grid_is_refused_before_any_work(serial_run, tmp_path):
    """It would never be run again, and the tables could not be made without it."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(serial_run[0], out)
    seed_one = pd.read_parquet(out / "results.parquet").query("seed == 1")["task_id"].iloc[0]
    victim = out / "tasks" / f"{seed_one}.parquet"
    victim.write_bytes(b"garbage")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(OcrrError, match=rf"{victim} cannot be read .*its run is not in this grid.*or delete"):
        run_sweep(resolve_grid(**SMOKE, seeds=[0]), out, executor="serial")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


def test_a_log_line_cut_short_is_left_out(serial_run, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(serial_run[0], out)
    with open(out / "log.jsonl", "a", encoding="utf-8") as log:
        log.write('{"event": "done", "task_i')  # a crash of the machine in the middle of a line
    assert read_log(out)[-1]["event"] == "end"
    assert len(run_sweep(resolve_grid(**SMOKE), out, executor="serial").skipped) == 8


def test_a_failing_run_is_reported_kept_out_and_retried(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    real = executors.execute_task

    def broken_linear(task, shared, vecs=None, on_checkpoint=None):
        if task.system == "online_linear":
            raise RuntimeError("diverged")
        return real(task, shared, vecs)

    monkeypatch.setattr(executors, "execute_task", broken_linear)
    result = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    assert len(result.ran) == 4 and len(result.failed) == 4
    assert all("RuntimeError: diverged" in message for _, message in result.failed)
    assert set(pd.read_parquet(out / "results.parquet")["system"]) == {"substrate"}
    monkeypatch.setattr(executors, "execute_task", real)
    retried = run_sweep(resolve_grid(**SMOKE), out, executor="serial")
    assert {t.system for t in retried.ran} == {"online_linear"} and len(retried.ran) == 4


# --- executors agree ----------------------------------------------------------------------------


@pytest.mark.slow
def test_local_processes_give_the_same_table(serial_run, tmp_path):
    out = tmp_path / "local"
    result = run_sweep(resolve_grid(**SMOKE), out, executor="local", jobs=2)
    assert not result.failed, result.failed
    pids = {r["pid"] for r in read_log(out) if r["event"] == "done"}
    # Ran in the pool's processes, not this one. Which of the two takes a run is up to the pool:
    # runs this small can all go to the first process started while the other still imports.
    assert pids and os.getpid() not in pids and len(pids) <= 2
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()


@pytest.mark.slow
def test_ray_gives_the_same_table(serial_run, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    result = run_sweep(resolve_grid(**SMOKE), out, executor="ray", jobs=2)
    assert not result.failed, result.failed
    assert (out / "results.csv").read_bytes() == (serial_run[0] / "results.csv").read_bytes()


@pytest.mark.parametrize("address", ["foo:bar", "foo", "host:", ":6379", "host:70000", "http://host:8265", "::1:6379"])
def test_a_ray_address_of_no_form_ray_takes_is_refused_naming_them(address, tmp_path, capsys):
    """--address foo:bar ended in Ray's own ValueError, from inside the run."""
    with pytest.raises(OcrrError, match="is not a Ray cluster address; give auto, local, HOST:PORT"):
        sweep.make_executor("ray", address=address)
    argv = ["sweep", "--datasets", "synthetic", "--systems", "substrate", "--seeds", "0", "--executor", "ray"]
    assert main([*argv, "--address", address, "--out", str(tmp_path / "s"), "--quiet"]) == 2
    assert f"--address {address!r} is not a Ray cluster address" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address", ["auto", "local", "10.0.0.5:6379", "[::1]:6379", "ray://head:10001"])
def test_the_ray_address_forms_pass_the_door(address):
    executors.check_ray_address(address)


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_ray_address_where_nothing_listens_is_refused_at_the_door(scheme, tmp_path, capsys):
    """ray.init retries such an address for minutes, silently; the door asks it once."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    address = f"{scheme}127.0.0.1:{closed}"
    with pytest.raises(OcrrError, match=rf"no Ray cluster answers at --address {address} \("):
        sweep.make_executor("ray", address=address)
    argv = ["sweep", "--datasets", "demo", "--systems", "static_knn", "--seeds", "0", "--executor", "ray"]
    assert main([*argv, "--address", address, "--out", str(tmp_path / "s"), "--quiet"]) == 2
    assert "no Ray cluster answers" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_ray_missing_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(OcrrError, match=r"pip install -e '\.\[ray\]'"):
        sweep.make_executor("ray")


# --- the command --------------------------------------------------------------------------------


def test_cli_sweep_then_resume(tmp_path, capsys):
    out = tmp_path / "s"
    args = [
        "sweep",
        "--preset",
        "smoke",
        "--seeds",
        "0",
        "--policies",
        "oracle",
        "--executor",
        "serial",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "2 runs in the grid: 0 already done, 2 ran, 0 failed" in printed and "ocrr report" in printed
    assert main(args + ["--dry-run"]) == 0
    assert "2 already done" in capsys.readouterr().out
    assert main(args) == 0
    assert "2 already done, 0 ran" in capsys.readouterr().out


def test_cli_sweep_errors(tmp_path, capsys):
    assert main(["sweep", "--out", str(tmp_path)]) == 2
    assert "--preset" in capsys.readouterr().err
    assert main(["sweep", "--preset", "smoke", "--systems", "substrate,sbustrate", "--out", str(tmp_path)]) == 2
    assert "unknown system 'sbustrate'" in capsys.readouterr().err
    assert not (tmp_path / "tasks").exists() or not list((tmp_path / "tasks").iterdir())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--encoders", "nosuch"], "unknown encoder 'nosuch'"),
        (["--encoders", "precomputed:missing.npy"], "precomputed embeddings file 'missing.npy' not found"),
        (["--datasets", "banking77", "--data-dir", "nowhere"], "given by --data-dir does not exist: nowhere"),
        (["--datasets", "banking77", "--data-dir", "afile"], "given by --data-dir is a file, not a folder: afile"),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_the_dry_run_refuses_what_the_run_refuses_and_neither_leaves_a_folder(
    extra, message, dry, tmp_path, capsys, monkeypatch
):
    """The dry run passed these, and the refused run left sweep.json and tasks/ in --out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder\n")
    argv = ["sweep", "--datasets", "demo", "--systems", "substrate", "--seeds", "0", "--quiet", "--out", "s"]
    assert main([*argv, *extra, *(["--dry-run"] if dry else [])]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_run_refused_while_its_data_loads_leaves_no_folder(tmp_path):
    """What only the data can tell (vectors of the wrong shape) is found before the folder is made."""
    import numpy as np

    np.save(tmp_path / "v.npy", np.ones((3, 4), np.float32))
    grid = Grid(datasets=["demo"], systems=["substrate"], seeds=[0], encoders=[f"precomputed:{tmp_path / 'v.npy'}"])
    with pytest.raises(OcrrError, match="has shape"):
        run_sweep(grid, tmp_path / "s", executor="serial")
    assert not (tmp_path / "s").exists()


def test_runs_start_longest_first_without_changing_results(tmp_path):
    tasks = Grid(datasets=["synthetic"], seeds=[0, 1], systems=["substrate", "online_linear"]).tasks(resolve=False)
    slow = Task("synthetic", "{}", "dataset", HELDOUT, "oracle", 0, "lora_deberta")
    # nothing known yet: the systems known to be slow go first, the rest keep grid order
    assert sweep.longest_first(tasks + [slow], tmp_path) == [slow] + tasks
    # then the folder's log decides
    log = sweep.Log(tmp_path / "log.jsonl")
    log.write(event="done", dataset="synthetic", system="online_linear", cpu_seconds=9.0)
    log.write(event="done", dataset="synthetic", system="substrate", cpu_seconds=1.0)
    log.write(event="done", dataset="synthetic", system="lora_deberta", cpu_seconds=5.0)
    order = [t.system for t in sweep.longest_first(tasks + [slow], tmp_path)]
    assert order == ["online_linear", "online_linear", "lora_deberta", "substrate", "substrate"]


def test_runs_sharing_a_seed_state_are_spread_apart(tmp_path):
    # river_logreg x 2 datasets x 2 policies x 2 seeds: one seed fit per (dataset, seed), shared
    # by both policies. Grid order would reach banking77/random50 before clinc150/oracle.
    tasks = Grid(
        datasets=["banking77", "clinc150"], policies=["oracle", "random50"], seeds=[0, 1], systems=["river_logreg"]
    ).tasks(resolve=False)
    order = [(t.dataset, t.policy, t.seed) for t in sweep.longest_first(tasks, tmp_path)]
    # every (dataset, seed)'s first run goes first, so the workers fit different seed models
    assert order == [
        ("banking77", "oracle", 0),
        ("banking77", "oracle", 1),
        ("clinc150", "oracle", 0),
        ("clinc150", "oracle", 1),
        ("banking77", "random50", 0),
        ("banking77", "random50", 1),
        ("clinc150", "random50", 0),
        ("clinc150", "random50", 1),
    ]


def test_a_worker_is_not_handed_a_run_whose_cell_is_already_in_progress(tmp_path):
    # the 2nd policy of (clinc150, seed 2) would wait for the 1st's seed fit: another cell's run goes first
    tasks = Grid(
        datasets=["banking77", "clinc150"], policies=["oracle", "random50"], seeds=[0, 2], systems=["river_logreg"]
    ).tasks(resolve=False)
    queue = sweep.longest_first(tasks, tmp_path)
    first, second = queue[3], queue[7]  # clinc150/oracle/2, clinc150/random50/2
    assert (first.dataset, first.seed, second.dataset, second.seed) == ("clinc150", 2, "clinc150", 2)
    rest = [second, queue[4], queue[5]]
    assert executors.next_task(rest, [first]) == 1  # skip the cell in progress
    assert executors.next_task(rest, [queue[0]]) == 0  # an unrelated run in progress: queue order
    assert executors.next_task([second], [first]) == 0  # nothing else left: it waits its turn


def test_execution_settings_do_not_change_task_ids():
    """How a run executes (lora's device, threads, progress) is not what it computes."""
    plain = Grid(datasets=["synthetic"], seeds=[0], systems=["lora"]).tasks(resolve=False)[0]
    placed = Grid(datasets=["synthetic"], seeds=[0], systems=["lora:device=cpu:threads=2"]).tasks(resolve=False)[0]
    assert placed.system == "lora:device=cpu:threads=2"  # the worker still gets the settings
    assert placed.task_id == plain.task_id
    tuned = Grid(datasets=["synthetic"], seeds=[0], systems=["lora:rank=4"]).tasks(resolve=False)[0]
    assert tuned.task_id != plain.task_id  # a hyperparameter does change it
