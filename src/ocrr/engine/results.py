"""Writing results: tidy CSVs, markdown tables, config.json, and the long table made wide.

Files are written with fixed formats and sorted keys so that the same inputs and seed
give byte-identical ``per_checkpoint.csv``, ``summary.csv``, ``summary.md`` and
``config.json``. Wall-clock figures go to ``timings.csv`` only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ocrr.protocols.summary import FOOTPRINT_COLUMNS

RUN_FOLDER_KEYS = ["dataset", "encoder", "policy", "seed", "system"]  # a run folder's key columns, in file order
PER_CHECKPOINT_COLUMNS = RUN_FOLDER_KEYS + ["step", "corrections", "acc_novel", "acc_original"]


def write_csv(df: pd.DataFrame, path: Path, first: list[str]) -> None:
    cols = [c for c in first if c in df.columns] + [c for c in df.columns if c not in first]
    df[cols].to_csv(path, index=False, lineterminator="\n", float_format="%.6f")


def markdown(title: str, header: list[str], rows: list[list[str]], footnote: str) -> str:
    """A titled markdown table with a footnote."""
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines + ["", footnote, ""])


def write_json(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


# --- long format -> wide tables -----------------------------------------------------------------

INT_METRICS = ["corrections", *FOOTPRINT_COLUMNS]


def wide_table(long: pd.DataFrame, keys: list[str], metric_order: list[str] | tuple = ()) -> pd.DataFrame:
    """One row per (run keys, step) with one column per metric, from the long table
    (keys..., step, episode, metric, value). Footprints are run-level: every row of a run
    gets its run's. Columns: keys, step, corrections, ``metric_order``, footprints, any other
    metric (sorted), episode. Rows: sorted by keys, then step."""
    if not len(long):
        return pd.DataFrame(columns=list(keys) + ["step", "corrections", *metric_order, "episode"])
    long = long.drop_duplicates(subset=list(keys) + ["step", "episode", "metric"], keep="last")
    is_fp = long["metric"].isin(FOOTPRINT_COLUMNS)
    table = long[~is_fp].pivot(index=list(keys) + ["step", "episode"], columns="metric", values="value")
    table = table.reset_index()
    table.columns.name = None
    if is_fp.any():
        fp = long[is_fp].pivot(index=list(keys), columns="metric", values="value").reset_index()
        fp.columns.name = None
        table = table.merge(fp, on=list(keys), how="left")
    for col in INT_METRICS:
        if col in table.columns:
            table[col] = table[col].fillna(0).astype("int64")
    table["step"] = table["step"].astype("int64")
    table["episode"] = table["episode"].astype("int64")
    metrics = (
        ["corrections"]
        + [m for m in metric_order if m in table.columns]
        + [m for m in FOOTPRINT_COLUMNS if m in table.columns]
    )
    rest = sorted(c for c in table.columns if c not in set(keys) | {"step", "episode"} | set(metrics))
    return table[list(keys) + ["step"] + metrics + rest + ["episode"]]
