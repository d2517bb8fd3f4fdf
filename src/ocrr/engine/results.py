"""Writing a run's results: tidy CSVs, the summary table, and config.json.

Files are written with fixed formats and sorted keys so that the same inputs and seed
give byte-identical ``per_checkpoint.csv``, ``summary.csv``, ``summary.md`` and
``config.json``. Wall-clock figures go to ``timings.csv`` only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ocrr.engine.metrics import THRESHOLDS

PER_CHECKPOINT_COLUMNS = [
    "dataset",
    "encoder",
    "policy",
    "seed",
    "system",
    "step",
    "corrections",
    "acc_novel",
    "acc_original",
]
SUMMARY_COLUMNS = (
    [
        "dataset",
        "encoder",
        "policy",
        "system",
        "n_seeds",
        "final_novel_mean",
        "final_novel_std",
        "final_original_mean",
        "final_original_std",
    ]
    + [f"corrections_to_{t}_{s}" for t in THRESHOLDS for s in ("mean", "reached")]
    + ["footprint_entries", "footprint_bytes", "footprint_params", "corrections_mean"]
)


def write_csv(df: pd.DataFrame, path: Path, first: list[str]) -> None:
    cols = [c for c in first if c in df.columns] + [c for c in df.columns if c not in first]
    df[cols].to_csv(path, index=False, lineterminator="\n", float_format="%.6f")


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
    entries, params = int(row.get("footprint_entries", 0) or 0), int(row.get("footprint_params", 0) or 0)
    parts = []
    if entries:
        parts.append(f"{entries:,} entries")
    if params:
        parts.append(f"{params:,} params")
    return " + ".join(parts) or "–"


def table_rows(summary: pd.DataFrame) -> list[list[str]]:
    """The paper's Table 1 columns: system, buffer, final novel/original, corrections to 10/50/70 %."""
    rows = []
    for _, r in summary.iterrows():
        n = int(r["n_seeds"])
        rows.append(
            [
                r["system"],
                fmt_buffer(r),
                fmt_acc(r["final_novel_mean"], r["final_novel_std"], n),
                fmt_acc(r["final_original_mean"], r["final_original_std"], n),
            ]
            + [
                fmt_corrections(r[f"corrections_to_{t}_mean"], int(r[f"corrections_to_{t}_reached"]), n)
                for t in THRESHOLDS
            ]
        )
    return rows


TABLE_HEADER = ["system", "buffer", "final novel", "final original"] + [f"→{t}%" for t in THRESHOLDS]


def markdown(title: str, header: list[str], rows: list[list[str]], footnote: str) -> str:
    """A titled markdown table with a footnote."""
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines + ["", footnote, ""])


TABLE_NOTE = (
    "Final accuracies are mean ± std (population) over seeds at the end of the stream. "
    "→N%: corrections applied when novel accuracy first reached N % (checkpoints every 50 items), "
    "mean over the seeds that reached it; '(r/n)' when only r of n seeds did."
)


def write_json(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


# --- long format -> wide tables -----------------------------------------------------------------

FOOTPRINT_METRICS = ("footprint_entries", "footprint_params", "footprint_bytes")  # run-level
INT_METRICS = ("corrections",) + FOOTPRINT_METRICS


def wide_table(long: pd.DataFrame, keys: list[str], metric_order: list[str] | tuple = ()) -> pd.DataFrame:
    """One row per (run keys, step) with one column per metric, from the long table
    (keys..., step, episode, metric, value). Footprints are run-level: every row of a run
    gets its run's. Columns: keys, step, corrections, ``metric_order``, footprints, any other
    metric (sorted), episode. Rows: sorted by keys, then step."""
    if not len(long):
        return pd.DataFrame(columns=list(keys) + ["step", "corrections", *metric_order, "episode"])
    long = long.drop_duplicates(subset=list(keys) + ["step", "episode", "metric"], keep="last")
    is_fp = long["metric"].isin(FOOTPRINT_METRICS)
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
        + [m for m in FOOTPRINT_METRICS if m in table.columns]
    )
    rest = sorted(c for c in table.columns if c not in set(keys) | {"step", "episode"} | set(metrics))
    return table[list(keys) + ["step"] + metrics + rest + ["episode"]]
