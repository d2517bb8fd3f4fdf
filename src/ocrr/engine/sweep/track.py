"""A task's output told to a tracker (ocrr.engine.tracking), where outputs are collected: what
identifies the run (its configuration, the dataset's files and the embeddings by sha256) and
its checkpoints."""

from __future__ import annotations

import json

from ocrr.engine.sweep.data import SharedData
from ocrr.engine.sweep.grid import Task
from ocrr.engine.tracking import Tracker, report_run
from ocrr.specs import parse_spec


def track_task(tracker: Tracker, task: Task, shared: SharedData, output: dict) -> None:
    """One finished run: ``output`` as ``execute_task`` returns it."""
    params = run_params(task, shared, output["hyperparameters"])
    report_run(tracker, task.task_id, run_name(task), params, output["metrics"], output["footprint"])


def track_failure(tracker: Tracker, task: Task, shared: SharedData, error: str) -> None:
    """One run that failed, with its error message."""
    tracker.run_started(
        task.task_id, run_name(task), run_params(task, shared, json.loads(task.hyperparameters or "{}"))
    )
    tracker.run_ended(task.task_id, error=error)


def run_name(task: Task) -> str:
    return f"{task.dataset} · {task.policy} · {task.system} · seed {task.seed}"


def run_params(task: Task, shared: SharedData, hyperparameters: dict) -> dict[str, object]:
    """A run's parameters: its configuration, each hyperparameter as ``hp.<name>``, and the
    sha256 of the dataset's files and of the embeddings (as config.json records them)."""
    system_name, options = parse_spec(task.system)
    return {
        "task_id": task.task_id,
        "dataset": task.dataset,
        "data_options": json.loads(task.data_options),
        "encoder": shared.encoder_id,
        "protocol": task.protocol,
        "policy": task.policy,
        "seed": task.seed,
        "system": task.system,
        "system_name": system_name,
        "system_options": options,
        **{f"hp.{key}": value for key, value in hyperparameters.items()},
        "dataset_files_sha256": shared.dataset.files,
        "embedding_sha256": shared.sha256,
    }
