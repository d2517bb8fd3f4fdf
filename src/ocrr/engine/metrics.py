"""Summaries of tidy per-checkpoint results: final accuracies, corrections-to-N%, online accuracy.

Inputs are tables (one row per run x checkpoint), never objects, so summaries can be
recomputed from files. Standard deviations are population std (ddof=0) over seeds.
``summarise`` is the held-out protocol's (the paper's Table 1 numbers); ``add_footprints``
and ``add_online_accuracy`` serve every protocol.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

THRESHOLDS = (10, 50, 70)
RUN_KEYS = ["dataset", "encoder", "policy", "system", "seed"]
CELL_KEYS = ["dataset", "encoder", "policy", "system"]


def corrections_to(run: pd.DataFrame, threshold_pct: float) -> float:
    """Corrections at the first checkpoint whose novel accuracy reaches the threshold; NaN if never."""
    run = run.sort_values("step")
    hit = run["acc_novel"].to_numpy() >= threshold_pct / 100.0 - 1e-12
    return float(run["corrections"].to_numpy()[np.argmax(hit)]) if hit.any() else float("nan")


def per_run(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """One row per run: final accuracies and corrections to each threshold."""
    rows = []
    for key, run in per_checkpoint.groupby(RUN_KEYS, sort=True):
        last = run.loc[run["step"].idxmax()]
        row = dict(zip(RUN_KEYS, key))
        row.update(
            final_novel=float(last["acc_novel"]),
            final_original=float(last["acc_original"]),
            corrections=int(last["corrections"]),
            steps=int(last["step"]),
        )
        for t in THRESHOLDS:
            row[f"corrections_to_{t}"] = corrections_to(run, t)
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, encoder, policy, system): mean and std over seeds (footprints: mean, rounded)."""
    runs = per_run(per_checkpoint)
    rows = []
    for key, cell in runs.groupby(CELL_KEYS, sort=False):
        row = dict(zip(CELL_KEYS, key))
        row["n_seeds"] = len(cell)
        for col in ("final_novel", "final_original"):
            row[f"{col}_mean"] = float(cell[col].mean())
            row[f"{col}_std"] = float(cell[col].std(ddof=0))
        row["corrections_mean"] = float(cell["corrections"].mean())
        for t in THRESHOLDS:
            reached = cell[f"corrections_to_{t}"].dropna()
            row[f"corrections_to_{t}_mean"] = float(reached.mean()) if len(reached) else float("nan")
            row[f"corrections_to_{t}_reached"] = int(len(reached))
        rows.append(row)
    return add_footprints(pd.DataFrame(rows), footprints)


FOOTPRINT_COLUMNS = ["footprint_entries", "footprint_params", "footprint_bytes"]


def add_footprints(summary: pd.DataFrame, footprints: pd.DataFrame | None) -> pd.DataFrame:
    """Each cell's footprint: the mean over its runs, rounded."""
    if footprints is None or not len(footprints) or not len(summary):
        return summary
    fp = footprints.groupby(CELL_KEYS, sort=False)[FOOTPRINT_COLUMNS]
    return summary.merge(fp.mean().round().astype("int64").reset_index(), on=CELL_KEYS, how="left")


def add_online_accuracy(summary: pd.DataFrame, per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """``online_accuracy_mean`` / ``_std``: over seeds, each run's accuracy on its whole stream
    (every prediction made before the system learned that item)."""
    if "online_accuracy" not in per_checkpoint.columns or not len(summary):
        return summary
    last = per_checkpoint.sort_values("step", kind="mergesort").groupby(RUN_KEYS, sort=False).tail(1)
    stats = last.groupby(CELL_KEYS, sort=False)["online_accuracy"].agg(
        online_accuracy_mean="mean", online_accuracy_std=lambda v: float(v.std(ddof=0))
    )
    return summary.merge(stats.reset_index(), on=CELL_KEYS, how="left")


def order_like(summary: pd.DataFrame, systems: list[str]) -> pd.DataFrame:
    """Rows in the order systems were asked for."""
    rank = {s: i for i, s in enumerate(systems)}
    return summary.sort_values(by="system", key=lambda col: col.map(rank), kind="stable").reset_index(drop=True)
