"""Grids of runs: expand a grid into tasks, skip the finished ones, execute the rest, consolidate.

The rooms: ``grid`` (config files, tasks and their ids), ``presets`` (the named grids),
``data`` (each dataset embedded once, shared by workers), ``execute`` (one task),
``executors`` (serial, local processes, Ray), ``store`` (task files, consolidated tables,
log). ``ocrr run`` is a one-cell grid run by the serial executor (ocrr.engine.experiment).
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ocrr.engine.sweep.data import SharedData, prepare_data
from ocrr.engine.sweep.executors import available_cores, make_executor
from ocrr.engine.sweep.grid import CONFIG_COLUMNS, KEY_COLUMNS, Grid, Task, load_config, resolve_grid
from ocrr.engine.sweep.presets import MAIN_SWEEP_SYSTEMS, PRESETS, SMOKE_DATA, STORAGE_SYSTEMS
from ocrr.engine.sweep.store import (
    Log,
    consolidate,
    discard_task,
    finished_ids,
    load_metrics,
    load_results,
    read_log,
    save_task,
    write_manifest,
)
from ocrr.engine.sweep.track import track_failure, track_task
from ocrr.engine.tracking import Tracker
from ocrr.errors import OcrrError


class Progress:
    """Callbacks a sweep reports to; the default does nothing (the CLI shows a rich display)."""

    def embedding(self, total: int):
        return None

    def begin(self, total: int, skipped: int, todo: int, workers: int) -> None: ...

    def task_done(self, task: Task, ok: bool) -> None: ...

    def end(self) -> None: ...

    def notice(self, text: str) -> None:
        """Something the user should know that stops nothing (a damaged task file run again)."""
        print(text, file=sys.stderr, flush=True)


@dataclass
class SweepResult:
    out: Path
    tasks: list[Task]  # the whole grid
    skipped: list[Task]  # already finished before this invocation
    ran: list[Task]  # finished now
    failed: list[tuple[Task, str]]
    results: pd.DataFrame  # consolidated, wide: every task file in OUT/tasks
    seconds: float


def run_sweep(
    grid: Grid,
    out: str | os.PathLike,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    tracker: Tracker | None = None,
) -> SweepResult:
    """Run the grid's unfinished tasks into ``out``; ``tracker`` (ocrr.engine.tracking) is told
    each run that runs now, as its output arrives here (never from a worker)."""
    started = time.perf_counter()
    out = Path(out)
    progress = progress or Progress()
    tasks = grid.tasks()
    runner = make_executor(executor, jobs, address)
    done, damaged = finished_tasks(out, tasks)
    for path, reason in damaged.items():
        progress.notice(f"{path} cannot be read ({reason}): its task's files are removed and it runs again.")
    skipped = [t for t in tasks if t.task_id in done]
    todo = longest_first([t for t in tasks if t.task_id not in done], out)
    ran: list[Task] = []
    failed: list[tuple[Task, str]] = []
    try:
        # Before the folder is made: a dataset or an encoder the run cannot have leaves nothing.
        data = prepare_data(todo, grid.data_dir, progress.embedding) if todo else {}
    except BaseException:
        progress.end()
        raise
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    write_manifest(out, grid, tasks)
    for task_id in dict.fromkeys(path.stem for path in damaged):
        discard_task(out, task_id)  # so that the tables can be made even if its run fails now
    log = Log(out / "log.jsonl")
    try:
        if todo:
            log.write(
                event="start",
                executor=runner.name,
                workers=runner.workers,
                total=len(tasks),
                skipped=len(skipped),
                todo=len(todo),
            )
            progress.begin(len(tasks), len(skipped), len(todo), min(runner.workers, len(todo)))
            outputs = runner.run(todo, data)
            try:
                for task, output in outputs:
                    ok = _record(out, log, task, output, ran, failed)
                    if tracker is not None and ok:
                        track_task(tracker, task, data[task.data_key], output)
                    elif tracker is not None:
                        track_failure(tracker, task, data[task.data_key], failed[-1][1])
                    progress.task_done(task, ok)
            finally:
                outputs.close()  # an interrupt here still shuts the pool down
    except KeyboardInterrupt:
        log.write(event="interrupted", finished=len(ran))
        consolidate(out)
        raise
    finally:
        progress.end()
    results = consolidate(out)
    log.write(event="end", ran=len(ran), failed=len(failed), seconds=round(time.perf_counter() - started, 3))
    return SweepResult(out, tasks, skipped, ran, failed, results, time.perf_counter() - started)


def finished_tasks(out: Path, tasks: list[Task]) -> tuple[set[str], dict[Path, str]]:
    """(ids of the finished tasks, {file that cannot be read: why}) of the sweep folder ``out``.
    A damaged file's task is not finished: it runs again. A damaged file of a task outside
    ``tasks`` would never be rewritten, and the tables could not be made: refused now."""
    damaged: dict[Path, str] = {}
    done = finished_ids(out, damaged)
    ids = {t.task_id for t in tasks}
    stray = [path for path in damaged if path.stem not in ids]
    if stray:
        raise OcrrError(
            f"{stray[0]} cannot be read ({damaged[stray[0]]}), and its run is not in this grid, so this sweep "
            f"would not run it again. Run the grid that made it (its sweep.json lists it), or delete "
            f"{'the file' if len(stray) == 1 else f'the {len(stray)} files that cannot be read'} to leave "
            f"{'its run' if len(stray) == 1 else 'their runs'} out."
        )
    return done, damaged


def _record(out: Path, log: Log, task: Task, output, ran: list[Task], failed: list[tuple[Task, str]]) -> bool:
    if not isinstance(output, BaseException):
        try:
            save_task(out, task, output)
        except OcrrError as err:
            output = err
    if isinstance(output, BaseException):
        message = f"{type(output).__name__}: {output}"
        failed.append((task, message))
        log.write(event="failed", task_id=task.task_id, system=task.system, seed=task.seed, error=message)
        return False
    ran.append(task)
    log.write(
        event="done",
        task_id=task.task_id,
        dataset=task.dataset,
        system=task.system,
        seed=task.seed,
        seconds=round(output["seconds"], 4),
        cpu_seconds=round(output.get("cpu_seconds", 0.0), 4),
        pid=output["pid"],
        threads=output.get("threads", 1),  # more than one: it took cores the finished runs left
    )
    return True


# Systems known to cost far more per run than the rest (transformers): started first when
# nothing better is known, so the grid does not end on one long run. (The river systems
# learn through ocrr's numpy mirror of river: not slow.)
SLOW_PREFIXES = ("lora_",)


def longest_first(tasks: list[Task], out: Path) -> list[Task]:
    """Order runs by expected cost, longest first: the CPU seconds this folder's log recorded
    for the same (dataset, system), else for the system, else a prior. Order never changes
    results (the table is sorted by its keys), only how well the workers stay busy."""
    by_pair: dict[tuple[str, str], list[float]] = {}
    by_system: dict[str, list[float]] = {}
    for record in read_log(out):
        if record.get("event") == "done" and "cpu_seconds" in record and "dataset" in record:
            by_pair.setdefault((record["dataset"], record["system"]), []).append(record["cpu_seconds"])
            by_system.setdefault(record["system"], []).append(record["cpu_seconds"])

    typical = float(np.median([np.mean(v) for v in by_system.values()])) if by_system else 0.0

    def cost(task: Task) -> float:
        pair = (task.dataset, task.system)
        if pair in by_pair:
            return float(np.mean(by_pair[pair]))
        if task.system in by_system:
            return float(np.mean(by_system[task.system]))
        return math.inf if task.system.startswith(SLOW_PREFIXES) else typical

    # Among equal costs, the runs of one (data, system, seed) -- the policies of a cell, which
    # share a seed state such as a cached river seed model -- are spread apart: the first of
    # every group goes first, so two workers do not wait on the same seed fit.
    seen: dict[tuple, int] = {}
    rank = {}
    for task in tasks:
        group = (task.data_key, task.system, task.seed)
        rank[task] = seen[group] = seen.get(group, -1) + 1
    return sorted(tasks, key=lambda t: (-cost(t), rank[t]))  # stable: otherwise grid order


__all__ = [
    "CONFIG_COLUMNS",
    "Grid",
    "KEY_COLUMNS",
    "MAIN_SWEEP_SYSTEMS",
    "PRESETS",
    "Progress",
    "SMOKE_DATA",
    "STORAGE_SYSTEMS",
    "SharedData",
    "SweepResult",
    "Task",
    "available_cores",
    "consolidate",
    "finished_ids",
    "finished_tasks",
    "load_config",
    "load_metrics",
    "load_results",
    "longest_first",
    "prepare_data",
    "read_log",
    "resolve_grid",
    "run_sweep",
]
