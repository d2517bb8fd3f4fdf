"""The sweep folder: task files (the source of truth), consolidated tables, manifest and log.

Layout of a sweep folder ``OUT``::

    OUT/tasks/<task_id>.parquet        one finished run, long format (the done-marker, written last)
    OUT/predictions/<task_id>.parquet  its stream predictions, one row per stream item
    OUT/timings/<task_id>.parquet      its wall-clock columns (kept apart: never reproducible)
    OUT/metrics.parquet                every finished task, long: config, step, episode, metric, value
    OUT/results.parquet, results.csv   the same, wide: one row per checkpoint, one column per metric
    OUT/predictions.parquet            every finished task's stream predictions
    OUT/timings.csv                    every finished task's timings
    OUT/sweep.json                     the grid of the last invocation and its task ids
    OUT/log.jsonl                      execution log: one line per task started/finished/failed

Task files are written atomically (ocrr.utils.files), so a task file exists only complete; a
re-run skips every task whose files can be read, and an interrupted sweep loses only the runs
in flight. A file damaged on disk since (a crash of the machine before the disk had it, a
copy cut short) cannot be read: its task is not finished, so a re-run runs it again (the same
result: a task is a function of its configuration), and the tables name the file until then.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from functools import partial
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ocrr import __version__
from ocrr.engine.results import wide_table, write_csv
from ocrr.engine.sweep.execute import METRIC_COLUMNS, PREDICTION_COLUMNS, TIMING_COLUMNS, task_frames
from ocrr.engine.sweep.grid import CONFIG_COLUMNS, KEY_COLUMNS, TASK_SCHEMA, Grid, Task
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS
from ocrr.utils.files import atomic_write, atomic_write_text


def task_path(out: Path, task_id: str) -> Path:
    return Path(out) / "tasks" / f"{task_id}.parquet"


TASK_FOLDERS = ("tasks", "predictions", "timings")  # a finished task's files, one in each


def finished_ids(out: Path, damaged: dict[Path, str] | None = None) -> set[str]:
    """The ids of the finished tasks: those whose task file exists and whose files can all be
    read. Each file that cannot be read goes into ``damaged``, with the reason."""
    done = set()
    for path in sorted((Path(out) / "tasks").glob("*.parquet")):
        problems = {}
        for folder in TASK_FOLDERS:
            file = Path(out) / folder / path.name
            reason = unreadable(file) if folder == "tasks" or file.exists() else None
            if reason is not None:
                problems[file] = reason
        if problems and damaged is not None:
            damaged.update(problems)
        elif not problems:
            done.add(path.stem)
    return done


def discard_task(out: Path, task_id: str) -> None:
    """Remove a task's files (some damaged): it is not finished, and runs again."""
    for folder in TASK_FOLDERS:
        (Path(out) / folder / f"{task_id}.parquet").unlink(missing_ok=True)


def unreadable(path: Path) -> str | None:
    """Why the Parquet file at ``path`` cannot be read whole, or None when it can."""
    try:
        pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as err:  # ArrowInvalid (a ValueError), an OSError of a bad page
        return _reason(err, path)
    return None


def _reason(err: Exception, path: Path) -> str:
    """Arrow's message without its "Could not open Parquet input source '<path>': " (the path is named anyway)."""
    text = str(err).strip()
    prefix = f"Could not open Parquet input source '{path}': "
    return text.removeprefix(prefix).rstrip(".") or type(err).__name__


def read_task_file(path: Path) -> pa.Table:
    """A task's Parquet file, or the error naming it and the fix."""
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as err:
        sweep = path.parent.parent
        raise OcrrError(
            f"{path} cannot be read ({_reason(err, path)}): the file is damaged. Run the sweep that made "
            f"{sweep} again (the same ocrr sweep command, --out {sweep}): it runs that task again; or delete "
            "the file to leave its run out."
        ) from None


def save_task(out: Path, task: Task, output: dict) -> None:
    """Predictions and timings first, then the metrics file: its existence marks the task done."""
    frames = task_frames(task, output)
    for folder in ("timings", "predictions"):
        atomic_write(out / folder / f"{task.task_id}.parquet", partial(frames[folder].to_parquet, index=False))
    atomic_write(task_path(out, task.task_id), lambda p: frames["metrics"].to_parquet(p, index=False))


def _read_all(folder: Path, columns: list[str]) -> pd.DataFrame:
    # One Arrow table, converted to pandas once: a sweep has hundreds of small task files, and
    # pandas' per-file conversion, not the reading, was most of the time.
    tables = [t for t in (read_task_file(p) for p in sorted(folder.glob("*.parquet"))) if t.num_rows]
    if not tables:
        return pd.DataFrame(columns=columns)
    df = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    return df[[c for c in columns if c in df.columns] + [c for c in df.columns if c not in columns]]


def load_metrics(out: str | os.PathLike) -> pd.DataFrame:
    """Every finished task, long format, in canonical order (independent of run order)."""
    df = _read_all(Path(out) / "tasks", METRIC_COLUMNS)
    df = df.drop_duplicates(subset=["task_id", "step", "episode", "metric"], keep="last")
    return df.sort_values(KEY_COLUMNS + ["step", "episode", "metric"], kind="mergesort").reset_index(drop=True)


def wide_results(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per task and checkpoint: config columns, each protocol option as a column, then
    step, corrections, the protocols' metrics (in their order), footprints, the rest."""
    order, names = [], []
    for name in dict.fromkeys(metrics["protocol"]) if len(metrics) else []:
        protocol = PROTOCOLS.get(name)
        order += [m for m in getattr(protocol, "metrics", ()) if m not in order]
        names += [k for k in getattr(protocol, "options", {}) if k not in names]  # as the protocol declares them
    table = wide_table(metrics, CONFIG_COLUMNS, order)
    options = [json.loads(o) for o in table["protocol_options"]] if len(table) else []
    names += [k for k in dict.fromkeys(k for o in options for k in o) if k not in names]
    at = table.columns.get_loc("protocol_options") + 1
    for i, name in enumerate(names):
        table.insert(at + i, name, [o.get(name) for o in options])
    return table.sort_values(KEY_COLUMNS + ["step"], kind="mergesort").reset_index(drop=True)


def load_results(out: str | os.PathLike) -> pd.DataFrame:
    """Every finished task of a sweep folder as the wide results table."""
    return wide_results(load_metrics(out))


def consolidate(out: str | os.PathLike) -> pd.DataFrame:
    """Rewrite the consolidated tables from the task files; returns the wide results."""
    out = Path(out)
    metrics = load_metrics(out)
    results = wide_results(metrics)
    atomic_write(out / "metrics.parquet", lambda p: metrics.to_parquet(p, index=False))
    atomic_write(out / "results.parquet", lambda p: results.to_parquet(p, index=False))
    atomic_write(out / "results.csv", lambda p: write_csv(results, Path(p), list(results.columns)))
    predictions = _read_all(out / "predictions", PREDICTION_COLUMNS)
    if len(predictions):
        predictions = predictions.sort_values(["task_id", "item"], kind="mergesort")
    atomic_write(out / "predictions.parquet", lambda p: predictions.to_parquet(p, index=False))
    timings = _read_all(out / "timings", TIMING_COLUMNS)
    if len(timings):
        keys = metrics.drop_duplicates("task_id")[["task_id"] + KEY_COLUMNS]
        timings = keys.merge(timings, on="task_id").sort_values(KEY_COLUMNS + ["step"], kind="mergesort")
    atomic_write(out / "timings.csv", lambda p: write_csv(timings, Path(p), ["task_id"] + KEY_COLUMNS))
    return results


def write_manifest(out: Path, grid: Grid, tasks: list[Task]) -> None:
    manifest = {
        "ocrr": __version__,
        "task_schema": TASK_SCHEMA,
        "grid": {k: v for k, v in dataclasses.asdict(grid).items() if k != "data_dir"},
        "tasks": {t.task_id: t.config() for t in tasks},
    }
    atomic_write_text(out / "sweep.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")


class Log:
    """Append-only JSON-lines execution log (flushed per line: it survives a crash)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self, **record) -> None:
        record = {"time": round(time.time(), 3), **record}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")


def read_log(out: str | os.PathLike) -> list[dict]:
    """The log's records; a line that is not one (cut short by a crash of the machine) is left out:
    the log only orders runs, it decides nothing about them."""
    path = Path(out) / "log.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
