"""One experiment cell end to end, as ``ocrr run`` runs it: a one-cell grid of ``ocrr sweep``
(same tasks, same execution code), run in this process or on worker processes (``jobs``),
written as a run folder.

Reusable from Python::

    from ocrr.engine.experiment import Experiment, run_experiment
    result = run_experiment(Experiment(dataset="banking77", systems=["substrate", "online_linear"]))
    print(result.summary)

``plan_experiment`` builds the grid once (checking every option) and returns its tasks;
``run_experiment`` takes that plan, so a caller that counts or checks the runs first
(``ocrr run``) never builds it twice.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from ocrr import __version__
from ocrr.data import load_dataset
from ocrr.data.records import Dataset
from ocrr.engine.results import (
    PER_CHECKPOINT_COLUMNS,
    RUN_FOLDER_KEYS,
    markdown,
    wide_table,
    write_csv,
    write_json,
)
from ocrr.engine.sweep import Grid, Task, prepare_data
from ocrr.engine.sweep.execute import task_frames
from ocrr.engine.sweep.executors import LocalExecutor, SerialExecutor
from ocrr.engine.sweep.track import track_failure, track_task
from ocrr.engine.tracking import Tracker
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols.base import Protocol
from ocrr.protocols.summary import FOOTPRINT_COLUMNS

# The main job: `ocrr run`'s default systems (the main sweep's are ocrr.engine.sweep.MAIN_SWEEP_SYSTEMS)
MAIN_SYSTEMS = ["substrate", "static_knn", "static_linear", "online_linear"]


@dataclass
class Experiment:
    dataset: str = "banking77"
    systems: list[str] = field(default_factory=lambda: list(MAIN_SYSTEMS))
    policy: str = "oracle"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    encoder: str = "minilm"
    data_dir: str | None = None
    oos: bool = True  # CLINC150: keep "oos" as the 151st class
    data_options: dict = field(default_factory=dict)  # loader options (synthetic sizes, csv columns, ...)
    protocol: str = "heldout"  # a protocol spec, name:key=value
    # shortcuts for the held-out protocol's options (None: the protocol's default)
    n_heldout: int | None = None
    eval_cap: int | None = None
    every: int | None = None


@dataclass
class ExperimentResult:
    experiment: Experiment
    dataset: Dataset
    per_checkpoint: pd.DataFrame  # wide: one row per run x checkpoint
    metrics: pd.DataFrame  # long: run keys, step, episode, metric, value
    timings: pd.DataFrame
    footprints: pd.DataFrame
    predictions: pd.DataFrame  # one row per run x stream item
    summary: pd.DataFrame
    config: dict
    protocol: Protocol  # the protocol that ran
    encoder_id: str = ""


def experiment_grid(exp: Experiment) -> Grid:
    return Grid(
        datasets=[exp.dataset],
        policies=[exp.policy],
        seeds=list(exp.seeds),
        systems=list(exp.systems),
        encoders=[exp.encoder],
        protocols=[exp.protocol],
        data_options={exp.dataset: dict(exp.data_options)},
        n_heldout=exp.n_heldout,
        eval_cap=exp.eval_cap,
        every=exp.every,
        oos=exp.oos,
        data_dir=exp.data_dir,
    )


@dataclass
class ExperimentPlan:
    """An experiment with its grid built once: every system, option and protocol checked (a bad
    one fails here, before any encoding), each run a task, in run order (seed, then system)."""

    experiment: Experiment
    grid: Grid
    tasks: list[Task]

    @property
    def systems(self) -> list[str]:
        """Canonical system specs, in the order asked for."""
        return list(dict.fromkeys(t.system for t in self.tasks))

    def load_dataset(self) -> Dataset:
        exp = self.experiment
        return load_dataset(exp.dataset, data_dir=exp.data_dir, **self.grid.options_for(exp.dataset))


def plan_experiment(exp: Experiment) -> ExperimentPlan:
    grid = experiment_grid(exp)
    tasks = grid.tasks()
    systems = list(dict.fromkeys(t.system for t in tasks))
    tasks.sort(key=lambda t: (exp.seeds.index(t.seed), systems.index(t.system)))
    return ExperimentPlan(exp, grid, tasks)


def load_experiment_dataset(exp: Experiment) -> Dataset:
    """The experiment's dataset (only its loader options are needed: no task is resolved)."""
    return load_dataset(exp.dataset, data_dir=exp.data_dir, **experiment_grid(exp).options_for(exp.dataset))


def run_experiment(
    exp: Experiment | ExperimentPlan,
    dataset: Dataset | None = None,
    embed_progress=None,
    on_checkpoint: Callable | None = None,
    jobs: int = 1,
    tracker: Tracker | None = None,
) -> ExperimentResult:
    """Run every (seed, system) of the cell: in this process, or with ``jobs`` > 1 on that
    many worker processes (the same numbers: ``ocrr.engine.sweep.executors``).
    ``on_checkpoint(task, cp)`` hears every checkpoint in this process, and only each run's
    last one from workers. The first failing run raises its error. Give the plan
    (``plan_experiment``) when you already have it, so its grid is not built again.
    ``tracker`` (ocrr.engine.tracking) is told each run as its output arrives.

    Examples:
        One cell on a small synthetic dataset (vectors made from the seed, no encoder), the
        substrate beside a k-NN that never learns from corrections:

        >>> from ocrr.engine.experiment import Experiment, run_experiment
        >>> tiny = {"n_classes": 14, "dim": 16, "n_train_per_class": 10, "n_test_per_class": 4}
        >>> exp = Experiment(dataset="synthetic", data_options=tiny, systems=["substrate", "static_knn"], seeds=[0])
        >>> result = run_experiment(exp)
        >>> print(result.summary[["system", "final_novel_mean", "corrections_mean"]].to_string(index=False))
            system  final_novel_mean  corrections_mean
         substrate              0.75              48.0
        static_knn              0.00             100.0
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise OcrrError(f"jobs must be a whole number of worker processes, at least 1; got {jobs!r}")
    plan = exp if isinstance(exp, ExperimentPlan) else plan_experiment(exp)
    exp, tasks, systems = plan.experiment, plan.tasks, plan.systems
    loaded = {exp.dataset: dataset} if dataset else None
    data = prepare_data(tasks, exp.data_dir, embed_progress, loaded=loaded)
    shared = data[tasks[0].data_key]
    protocol = tasks[0].protocol_object
    outputs = {}
    executor = SerialExecutor(on_checkpoint) if jobs == 1 or len(tasks) == 1 else LocalExecutor(jobs)
    for task, output in executor.run(tasks, data):
        if isinstance(output, BaseException):
            if tracker is not None:
                track_failure(tracker, task, data[task.data_key], f"{type(output).__name__}: {output}")
            raise output
        if tracker is not None:
            track_task(tracker, task, data[task.data_key], output)
        outputs[task.task_id] = output
        if on_checkpoint and executor.name != "serial":
            on_checkpoint(task, _RunDone(max((m["step"] for m in output["metrics"]), default=0)))
    frames: dict[str, list] = {"metrics": [], "timings": [], "predictions": [], "footprints": []}
    hyper = {}
    for task in tasks:  # in the order asked for, however the runs finished
        output = outputs[task.task_id]
        keys = {
            "dataset": shared.dataset.name,
            "encoder": shared.encoder_id,
            "policy": task.policy,
            "seed": task.seed,
            "system": task.system,
        }
        got = task_frames(task, output)
        metrics = got["metrics"]
        is_fp = metrics["metric"].isin(FOOTPRINT_COLUMNS)
        frames["metrics"].append(metrics[~is_fp][["step", "episode", "metric", "value"]].assign(**keys))
        frames["footprints"].append({**keys, **{k: int(v) for k, v in output["footprint"].items()}})
        frames["timings"].append(got["timings"].drop(columns="task_id").assign(**keys))
        frames["predictions"].append(got["predictions"].drop(columns="task_id").assign(**keys))
        hyper[task.system] = output["hyperparameters"]
    long = pd.concat(frames["metrics"], ignore_index=True)[RUN_FOLDER_KEYS + ["step", "episode", "metric", "value"]]
    rank = {(s, sys): i for i, (s, sys) in enumerate((t.seed, t.system) for t in tasks)}
    per_checkpoint = _in_run_order(wide_table(long, RUN_FOLDER_KEYS, protocol.metrics), rank)
    footprints = pd.DataFrame(frames["footprints"])
    timings = _in_run_order(pd.concat(frames["timings"], ignore_index=True), rank)
    predictions = _in_run_order(pd.concat(frames["predictions"], ignore_index=True), rank, "item")
    summary = order_like(protocol.summarise(per_checkpoint, footprints), systems)
    config = _config(exp, shared, protocol, systems, hyper)
    return ExperimentResult(
        exp,
        shared.dataset,
        per_checkpoint,
        long,
        timings,
        footprints,
        predictions,
        summary,
        config,
        protocol,
        shared.encoder_id,
    )


@dataclass(frozen=True)
class _RunDone:
    """What ``on_checkpoint`` hears of a run that finished in a worker: its last checkpoint."""

    step: int
    last: bool = True


def order_like(summary: pd.DataFrame, systems: list[str]) -> pd.DataFrame:
    """Rows in the order systems were asked for."""
    rank = {s: i for i, s in enumerate(systems)}
    return summary.sort_values(by="system", key=lambda col: col.map(rank), kind="stable").reset_index(drop=True)


def _in_run_order(df: pd.DataFrame, rank: dict, within: str = "step") -> pd.DataFrame:
    """Rows in the order the runs were asked for (seed, then system), then by step or item."""
    order = [rank[(s, sys)] for s, sys in zip(df["seed"], df["system"])]
    df = df.assign(_run=order).sort_values(["_run", within], kind="mergesort").drop(columns="_run")
    return df.reset_index(drop=True)


def write_outputs(result: ExperimentResult, out: Path) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        name: out / name
        for name in (
            "per_checkpoint.csv",
            "timings.csv",
            "footprints.csv",
            "summary.csv",
            "summary.md",
            "config.json",
            "metrics.parquet",
            "predictions.parquet",
        )
    }
    write_csv(result.per_checkpoint, paths["per_checkpoint.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.timings, paths["timings.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.footprints, paths["footprints.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.summary, paths["summary.csv"], result.protocol.summary_columns())
    exp = result.experiment
    title = (
        f"{result.dataset.name} · {result.summary['policy'].iloc[0]} · {result.encoder_id} · "
        f"seeds {', '.join(map(str, exp.seeds))}"
    )
    header, rows, note = result.protocol.table(result.summary)
    paths["summary.md"].write_text(markdown(title, header, rows, note), encoding="utf-8")
    write_json(result.config, paths["config.json"])
    result.metrics.to_parquet(paths["metrics.parquet"], index=False)
    result.predictions.to_parquet(paths["predictions.parquet"], index=False)
    return paths


def _config(exp: Experiment, shared, protocol, systems: list[str], hyper: dict) -> dict:
    dataset = shared.dataset
    return {
        "experiment": {**asdict(exp), "systems": systems},
        "protocol": {**protocol.canonical(), "spec": protocol.spec()},
        "policy": {"name": exp.policy, "p": make_policy(exp.policy).p},
        "systems": hyper,
        "dataset": {
            "name": dataset.name,
            "files": dataset.files,
            "n_train": len(dataset.train),
            "n_test": len(dataset.test),
            "n_labels": len(dataset.labels),
            "notes": dataset.notes,
        },
        "embeddings": {"encoder": shared.encoder_id, "dim": _dim(shared), "sha256": shared.sha256},
        "versions": _versions(),
    }


def _dim(shared) -> int:
    return int(np.load(shared.vec_path, mmap_mode="r").shape[1])


def _versions() -> dict:
    """Installed versions, read from package metadata (importing them would cost seconds)."""
    versions: dict[str, str | None] = {"ocrr": __version__, "python": platform.python_version()}
    for package in ("numpy", "pandas", "torch", "sentence-transformers", "river", "faiss-cpu"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


__all__ = [
    "MAIN_SYSTEMS",
    "Experiment",
    "ExperimentPlan",
    "ExperimentResult",
    "load_experiment_dataset",
    "plan_experiment",
    "run_experiment",
    "write_outputs",
]
