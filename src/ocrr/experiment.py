"""One experiment cell end to end: dataset -> embeddings -> scenarios -> runs -> tables.

Used by ``ocrr run`` and reusable from Python::

    from ocrr.experiment import Experiment, run_experiment
    result = run_experiment(Experiment(dataset="banking77", systems=["substrate", "online_linear"]))
    print(result.summary)
"""

from __future__ import annotations

import platform
from importlib import metadata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ocrr import __version__
from ocrr.data import load_dataset
from ocrr.data.records import Dataset
from ocrr.encoders import DEFAULT_ENCODER, Embeddings, embed_dataset
from ocrr.metrics import order_like, summarise
from ocrr.policies import Policy, make_policy
from ocrr.protocols import Scenario, heldout_scenario
from ocrr.results import PER_CHECKPOINT_COLUMNS, SUMMARY_COLUMNS, markdown_table, write_csv, write_json
from ocrr.runner import CHECKPOINT_EVERY, Checkpoint, RunResult, run_to_rows
from ocrr.systems import expand_systems, make_system

MAIN_SYSTEMS = ["substrate", "static_knn", "static_linear", "online_linear"]


@dataclass
class Experiment:
    dataset: str = "banking77"
    systems: list[str] = field(default_factory=lambda: list(MAIN_SYSTEMS))
    policy: str = "oracle"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    encoder: str = DEFAULT_ENCODER
    data_dir: str | None = None
    oos: bool = True  # CLINC150: keep "oos" as the 151st class
    data_options: dict = field(default_factory=dict)  # loader options (synthetic sizes, csv columns, ...)
    n_heldout: int = 10
    eval_cap: int | None = 400
    every: int = CHECKPOINT_EVERY


@dataclass
class ExperimentResult:
    experiment: Experiment
    dataset: Dataset
    embeddings: Embeddings
    per_checkpoint: pd.DataFrame
    timings: pd.DataFrame
    footprints: pd.DataFrame
    summary: pd.DataFrame
    config: dict


def load_experiment_dataset(exp: Experiment) -> Dataset:
    options = {"oos": exp.oos, **exp.data_options} if exp.dataset == "clinc150" else dict(exp.data_options)
    return load_dataset(exp.dataset, data_dir=exp.data_dir, **options)


def run_experiment(exp: Experiment, dataset: Dataset | None = None, embed_progress=None,
                   on_checkpoint: Callable[[int, str, Checkpoint], None] | None = None) -> ExperimentResult:
    dataset = dataset or load_experiment_dataset(exp)
    emb = embed_dataset(dataset, exp.encoder, progress=embed_progress)
    policy = make_policy(exp.policy)
    specs = expand_systems(exp.systems)
    checkpoints, timings, footprints, hyper = [], [], [], {}
    for seed in exp.seeds:
        scenario = heldout_scenario(dataset, emb.train, emb.test, seed, exp.n_heldout, exp.eval_cap)
        keys = {"dataset": dataset.name, "encoder": emb.encoder_id, "policy": policy.name, "seed": seed}
        for spec in specs:
            cb = (lambda cp, seed=seed, spec=spec: on_checkpoint(seed, spec, cp)) if on_checkpoint else None
            res, hyper[spec] = run_one(scenario, policy, spec, keys, exp.every, cb)
            checkpoints += res.checkpoints
            timings += res.timings
            footprints.append(res.footprint)
    per_checkpoint = pd.DataFrame(checkpoints)
    footprint_df = pd.DataFrame(footprints)
    summary = order_like(summarise(per_checkpoint, footprint_df), specs)
    config = _config(exp, dataset, emb, specs, hyper, policy.p)
    return ExperimentResult(exp, dataset, emb, per_checkpoint, pd.DataFrame(timings), footprint_df, summary, config)


def run_one(scenario: Scenario, policy: Policy, spec: str, keys: dict, every: int = CHECKPOINT_EVERY,
            on_checkpoint: Callable[[Checkpoint], None] | None = None) -> tuple[RunResult, dict]:
    """One (dataset, encoder, policy, seed, system) run on a built scenario.

    Returns the run's tidy rows (keyed by ``keys`` plus ``system``) and the system's
    resolved hyperparameters. Sweeps call this once per task; ``run_experiment`` once
    per seed and system, so both give the same numbers for the same configuration.
    """
    system = make_system(spec, labels=scenario.labels, seed=scenario.seed_value)
    hyper = {"class": type(system).__name__, **system.hyperparameters()}
    return run_to_rows(system, scenario, policy, {**keys, "system": spec}, every, on_checkpoint), hyper


def write_outputs(result: ExperimentResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in
             ("per_checkpoint.csv", "timings.csv", "footprints.csv", "summary.csv", "summary.md", "config.json")}
    write_csv(result.per_checkpoint, paths["per_checkpoint.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.timings, paths["timings.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.footprints, paths["footprints.csv"], PER_CHECKPOINT_COLUMNS)
    write_csv(result.summary, paths["summary.csv"], SUMMARY_COLUMNS)
    exp = result.experiment
    title = (f"{result.dataset.name} · {result.summary['policy'].iloc[0]} · {result.embeddings.encoder_id} · "
             f"seeds {', '.join(map(str, exp.seeds))}")
    paths["summary.md"].write_text(markdown_table(result.summary, title), encoding="utf-8")
    write_json(result.config, paths["config.json"])
    return paths


def _config(exp: Experiment, dataset: Dataset, emb: Embeddings, specs: list[str], hyper: dict, p: float) -> dict:
    return {
        "experiment": {**asdict(exp), "systems": specs},
        "protocol": {"name": "heldout", "n_heldout": exp.n_heldout, "eval_cap": exp.eval_cap,
                     "checkpoint_every": exp.every},
        "policy": {"name": exp.policy, "p": p},
        "systems": hyper,
        "dataset": {"name": dataset.name, "files": dataset.files, "n_train": len(dataset.train),
                    "n_test": len(dataset.test), "n_labels": len(dataset.labels), "notes": dataset.notes},
        "embeddings": {"encoder": emb.encoder_id, "dim": int(emb.train.shape[1]), "sha256": emb.sha256},
        "versions": _versions(),
    }


def _versions() -> dict:
    """Installed versions, read from package metadata (importing them would cost seconds)."""
    versions = {"ocrr": __version__, "python": platform.python_version()}
    for package in ("numpy", "pandas", "torch", "sentence-transformers", "river", "faiss-cpu"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions
