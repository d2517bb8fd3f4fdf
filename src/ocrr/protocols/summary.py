"""The tidy-result vocabulary and the summary helpers every protocol shares.

A run's results are one row per (run, checkpoint): the run keys, ``step``, ``corrections``,
the protocol's metric columns and the run-level footprint columns. Summaries are computed
from such tables alone (never from live objects), so they can be rebuilt from files; the
engine writes them and the report draws them, both with these names. Standard deviations
are population std (ddof=0) over the runs of a cell.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

CELL_KEYS = ["dataset", "encoder", "policy", "system"]  # one table row: a system in one setting
RUN_KEYS = CELL_KEYS + ["seed"]  # one run

FOOTPRINT_ENTRIES, FOOTPRINT_PARAMS, FOOTPRINT_BYTES = "footprint_entries", "footprint_params", "footprint_bytes"
FOOTPRINT_COLUMNS = [FOOTPRINT_ENTRIES, FOOTPRINT_PARAMS, FOOTPRINT_BYTES]  # run-level: the end of the stream


def last_checkpoints(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """Each run's last checkpoint (its final state), in the order of their steps."""
    return per_checkpoint.sort_values("step", kind="mergesort").groupby(RUN_KEYS, sort=True).tail(1)


def mean_and_std(values: pd.Series) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=0))


def add_footprints(summary: pd.DataFrame, footprints: pd.DataFrame | None) -> pd.DataFrame:
    """Each cell's footprint: the mean over its runs, rounded."""
    if footprints is None or not len(footprints) or not len(summary):
        return summary
    fp = footprints.groupby(CELL_KEYS, sort=False)[FOOTPRINT_COLUMNS]
    return summary.merge(fp.mean().round().astype("int64").reset_index(), on=CELL_KEYS, how="left")


def add_run_stat(summary: pd.DataFrame, per_checkpoint: pd.DataFrame, column: str) -> pd.DataFrame:
    """``<column>_mean`` / ``_std`` per cell, over its runs, of each run's value at its end."""
    if column not in per_checkpoint.columns or not len(summary):
        return summary
    stats = (
        last_checkpoints(per_checkpoint)
        .groupby(CELL_KEYS, sort=False)[column]
        .agg(**{f"{column}_mean": "mean", f"{column}_std": lambda v: float(v.std(ddof=0))})
    )
    return summary.merge(stats.reset_index(), on=CELL_KEYS, how="left")


def add_online_accuracy(summary: pd.DataFrame, per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """``online_accuracy_mean`` / ``_std``: over seeds, each run's accuracy on its whole stream
    (every prediction made before the system learned that item)."""
    return add_run_stat(summary, per_checkpoint, "online_accuracy")


def final_values(per_checkpoint: pd.DataFrame, metrics: list[str], footprints: pd.DataFrame | None) -> pd.DataFrame:
    """One row per cell: the final value of every metric (mean and std over seeds), the
    corrections, the footprint and the online accuracy (any protocol's default summary)."""
    rows = []
    for key, cell in per_checkpoint.groupby(CELL_KEYS, sort=False):
        finals = last_checkpoints(cell)
        row = dict(zip(CELL_KEYS, key))
        row["n_seeds"] = len(finals)
        for m in metrics:
            row[f"final_{m}_mean"], row[f"final_{m}_std"] = mean_and_std(finals[m])
        row["corrections_mean"] = float(finals["corrections"].mean())
        rows.append(row)
    return add_online_accuracy(add_footprints(pd.DataFrame(rows), footprints), per_checkpoint)


def summarise_runs(
    runs: pd.DataFrame, columns: tuple[str, ...], thresholds: tuple[int, ...], footprints: pd.DataFrame | None
) -> pd.DataFrame:
    """One row per cell from a protocol's ``per_run`` table: mean and std over seeds of each of
    ``columns``, the mean corrections, corrections to each threshold, the footprint."""
    rows = []
    for key, cell in runs.groupby(CELL_KEYS, sort=False):
        row = dict(zip(CELL_KEYS, key))
        row["n_seeds"] = len(cell)
        for col in columns:
            row[f"{col}_mean"], row[f"{col}_std"] = mean_and_std(cell[col])
        row["corrections_mean"] = float(cell["corrections"].mean())
        row.update(corrections_to_across_seeds(cell, thresholds))
        rows.append(row)
    return add_footprints(pd.DataFrame(rows), footprints)


# --- numbers as the tables print them ------------------------------------------------------------


def corrections_to(run: pd.DataFrame, threshold_pct: float, accuracy: str) -> float:
    """Corrections at the first checkpoint whose ``accuracy`` column reaches the threshold; NaN if never."""
    run = run.sort_values("step")
    hit = run[accuracy].to_numpy() >= threshold_pct / 100.0 - 1e-12
    return float(run["corrections"].to_numpy()[np.argmax(hit)]) if hit.any() else float("nan")


def corrections_to_across_seeds(cell: pd.DataFrame, thresholds: tuple[int, ...]) -> dict[str, float | int]:
    """Per threshold: the mean corrections over the seeds that reached it, and how many did."""
    out: dict[str, float | int] = {}
    for t in thresholds:
        reached = cell[f"corrections_to_{t}"].dropna()
        out[f"corrections_to_{t}_mean"] = float(reached.mean()) if len(reached) else math.nan
        out[f"corrections_to_{t}_reached"] = int(len(reached))
    return out


def fmt_acc(mean: float, std: float, n: int) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:.3f} ± {std:.3f}" if n > 1 else f"{mean:.3f}"


def fmt_corrections(mean: float, reached: int, n: int) -> str:
    if reached == 0:
        return "never"
    text = f"{mean:.0f}"
    return text if reached == n else f"{text} ({reached}/{n})"


def fmt_buffer(row: pd.Series) -> str:
    entries, params = int(row.get(FOOTPRINT_ENTRIES, 0) or 0), int(row.get(FOOTPRINT_PARAMS, 0) or 0)
    parts = []
    if entries:
        parts.append(f"{entries:,} entries")
    if params:
        parts.append(f"{params:,} params")
    return " + ".join(parts) or "–"
