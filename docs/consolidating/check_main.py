"""The consolidating memory's main check from a finished `ocrr sweep --preset consolidating` folder: per cell
(dataset x policy), every system's final novel / original accuracy (mean over seeds) and
corrections to 70 % novel, and whether each system beats the substrate on both finals and
reaches 70 % in no more corrections. Prints markdown.

Run: .venv/bin/python docs/consolidating/check_main.py results/consolidating
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd


def per_run(folder: Path) -> pd.DataFrame:
    rows = []
    for f in sorted((folder / "tasks").glob("*.parquet")):
        d = pd.read_parquet(f)
        wide = d.pivot_table(index="step", columns="metric", values="value")
        key = d.iloc[0]
        if key["protocol"] != "heldout":
            continue
        reached = wide[wide["acc_novel"] >= 0.7]
        rows.append({"dataset": key["dataset"], "policy": key["policy"], "system": key["system"], "seed": key["seed"],
                     "novel": wide["acc_novel"].iloc[-1], "original": wide["acc_original"].iloc[-1],
                     "to70": reached["corrections"].iloc[0] if len(reached) else np.nan})
    return pd.DataFrame(rows)


def to70(values: pd.Series) -> str:
    hit = values.dropna()
    if not len(hit):
        return "never"
    return f"{hit.mean():.0f}" + ("" if len(hit) == len(values) else f" ({len(hit)}/{len(values)})")


def main(folder: str) -> None:
    runs = per_run(Path(folder))
    for (dataset, policy), cell in runs.groupby(["dataset", "policy"], sort=True):
        sub = cell[cell.system == "substrate"]
        print(f"\n### {dataset} · {policy} (seeds {', '.join(map(str, sorted(cell.seed.unique())))})\n")
        print("| system | final novel | final original | →70% | beats substrate (novel / original / →70%) |")
        print("| --- | --- | --- | --- | --- |")
        for system, runs_of in cell.groupby("system", sort=False):
            n, o = runs_of.novel, runs_of.original
            marks = ""
            if system != "substrate" and len(sub):
                s70, m70 = sub.to70, runs_of.to70
                reach_ok = (m70.notna().sum() >= s70.notna().sum()
                            and (s70.dropna().empty or m70.dropna().mean() <= s70.dropna().mean()))
                marks = " / ".join("yes" if ok else "**no**" for ok in (
                    n.mean() > sub.novel.mean(), o.mean() > sub.original.mean(), reach_ok))
            print(f"| {system} | {n.mean():.3f} ± {n.std(ddof=0):.3f} | {o.mean():.3f} ± {o.std(ddof=0):.3f} | "
                  f"{to70(runs_of.to70)} | {marks} |")


if __name__ == "__main__":
    main(sys.argv[1])
