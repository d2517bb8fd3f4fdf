"""Executing one task, in whichever process: scenario from the protocol, system from the
registry, one run, plain data back (long-format metrics, timings, footprint, predictions)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from ocrr.engine.runner import run_to_output
from ocrr.engine.sweep.data import SharedData, vectors
from ocrr.engine.sweep.grid import CONFIG_COLUMNS, Task
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.specs import canonical_json
from ocrr.systems import make_system
from ocrr.utils.threads import TaskThreads

METRIC_COLUMNS = CONFIG_COLUMNS + ["step", "episode", "metric", "value"]
TIMING_COLUMNS = ["task_id", "step", "episode", "fit_seconds", "predict_seconds", "correct_seconds", "eval_seconds"]
PREDICTION_COLUMNS = ["task_id", "episode", "step", "item", "label", "predicted", "corrected"]


def execute_task(
    task: Task,
    shared: SharedData,
    vecs: np.ndarray | None = None,
    on_checkpoint=None,
    core_share: Callable[[], int] | None = None,
) -> dict:
    """Run one task; return plain data (picklable across processes). In a pool worker,
    ``core_share`` says how many threads each running task may use now (``CoreBudget``):
    a system that takes free cores follows it between checkpoints, or, if it spreads its work
    itself (``use_free_cores``), is handed it; any other runs on one thread."""
    started, cpu = time.perf_counter(), time.process_time()  # CPU time: meaningful on a shared machine
    vecs = vectors(shared) if vecs is None else vecs
    train, test = vecs[: shared.n_train], vecs[shared.n_train :]
    scenario = task.protocol_object.build_scenario(shared.dataset, train, test, task.seed)
    system = make_system(task.system, labels=scenario.labels, seed=scenario.seed_value)
    hyper = {"class": type(system).__name__, **system.hyperparameters()}
    threads = None
    if core_share is not None:
        takes = getattr(system, "takes_free_cores", False)
        spreads = takes and callable(getattr(system, "use_free_cores", None))
        threads = TaskThreads(takes, core_share, spreads_itself=spreads)
        threads.update()
        if spreads:
            system.use_free_cores(threads.offered)
        on_checkpoint = _following(threads, on_checkpoint)
    output = run_to_output(system, scenario, make_policy(task.policy), on_checkpoint)
    return {
        "task_id": task.task_id,
        "metrics": output.metrics,
        "timings": output.timings,
        "footprint": output.footprint,
        "predictions": output.predictions,
        "hyperparameters": hyper,
        "seconds": time.perf_counter() - started,
        "cpu_seconds": time.process_time() - cpu,
        "pid": os.getpid(),
        "threads": threads.most if threads is not None else 1,
    }


def _following(threads: TaskThreads, on_checkpoint):
    def checkpoint(cp) -> None:
        threads.update()
        if on_checkpoint is not None:
            on_checkpoint(cp)

    return checkpoint


def task_frames(task: Task, output: dict) -> dict[str, pd.DataFrame]:
    """The task's long metric rows (with every configuration column), timings and predictions."""
    if task.hyperparameters and canonical_json(output["hyperparameters"]) != task.hyperparameters:
        raise OcrrError(
            f"task {task.task_id}: the worker built {task.system} with hyperparameters "
            f"{canonical_json(output['hyperparameters'])}, not {task.hyperparameters}. "
            "Install the same ocrr version on every worker."
        )
    cols = task.columns()
    rows = [{**cols, **r} for r in output["metrics"]]
    last = max(output["metrics"], key=lambda r: r["step"]) if output["metrics"] else {"step": 0, "episode": 0}
    rows += [
        {**cols, "step": last["step"], "episode": last["episode"], "metric": name, "value": float(value)}
        for name, value in output["footprint"].items()
    ]
    timings = pd.DataFrame([{"task_id": task.task_id, **r} for r in output["timings"]], columns=TIMING_COLUMNS)
    extra = [c for c in output["predictions"] if c not in PREDICTION_COLUMNS]  # a protocol's own columns
    predictions = pd.DataFrame({"task_id": task.task_id, **output["predictions"]}, columns=PREDICTION_COLUMNS + extra)
    metrics = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    metrics["seed"] = metrics["seed"].astype("int64")
    return {"metrics": metrics, "timings": timings, "predictions": predictions}
