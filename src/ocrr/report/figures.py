"""Report figures (matplotlib, Agg canvas, no pyplot state): recovery curves, the storage
Pareto (paper Figure 1) and final novel vs final original per cell (Figures 4-5).

Each figure is saved as PNG and SVG. Metadata that would change from run to run (dates,
random SVG ids) is fixed, so the same results give the same files.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ocrr.protocols.summary import FOOTPRINT_BYTES
from ocrr.report.tables import pareto_flags

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# Stable element ids in the SVGs; text kept as text (smaller, faster, selectable in the page).
RC: dict[RcKeyType, Any] = {"svg.hashsalt": "ocrr-report", "svg.fonttype": "none"}
NOVEL, ORIGINAL = "#1f77b4", "#d95f02"
MARKERS = "osD^vP*Xh<>p"


def system_styles(systems: list[str]) -> dict[str, tuple]:
    """One (colour, marker) per system, the same in every figure of a report."""
    cmap = matplotlib.colormaps["tab10" if len(systems) <= 10 else "tab20"]
    return {s: (cmap(i % cmap.N), MARKERS[i % len(MARKERS)]) for i, s in enumerate(systems)}


def save(fig: Figure, stem: Path) -> list[Path]:
    FigureCanvasAgg(fig)
    stem.parent.mkdir(parents=True, exist_ok=True)
    # appended, not with_suffix: a cell name may hold a dot ("stay=0.9") that is not a suffix
    png, svg = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")
    # constrained layout already fits everything: no bbox_inches="tight" (it draws each figure twice)
    with matplotlib.rc_context(RC):
        fig.savefig(png, dpi=110, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None, "Creator": None})
    return [png, svg]


# The held-out protocol's recovery curves: (metric, colour, label)
HELDOUT_CURVES = (("acc_novel", NOVEL, "novel"), ("acc_original", ORIGINAL, "original"))


def aligned_curves(rows: pd.DataFrame, metrics: tuple[str, ...] = ("acc_novel", "acc_original")) -> pd.DataFrame:
    """Mean and std over seeds at each checkpoint step, for one system.

    Seeds' streams differ in length; a finished run keeps its final state, so its last
    checkpoint is carried forward to later steps rather than dropping out of the mean.
    """
    out = {}
    for col in ("corrections", *metrics):
        wide = rows.pivot_table(index="step", columns="seed", values=col, aggfunc="first").sort_index().ffill()
        out[f"{col}_mean"] = wide.mean(axis=1)
        out[f"{col}_std"] = wide.std(axis=1, ddof=0).fillna(0.0)
    return pd.DataFrame(out).reset_index()


def recovery_figure(rows: pd.DataFrame, systems: list[str], title: str, curves: tuple = HELDOUT_CURVES) -> Figure:
    """One panel per system: each of ``curves`` (held-out: novel and original accuracy) vs
    corrections, mean ± std band."""
    n = len(systems)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(3.4 * ncols, 2.7 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True)).ravel()
    for ax, system in zip(axes, systems):
        aligned = aligned_curves(rows[rows["system"] == system], tuple(c[0] for c in curves))
        x = aligned["corrections_mean"]
        for col, colour, label in curves:
            mean, std = aligned[f"{col}_mean"], aligned[f"{col}_std"]
            ax.plot(x, mean, color=colour, lw=1.8, label=label, marker="." if len(x) < 4 else None)
            ax.fill_between(x, (mean - std).clip(0, 1), (mean + std).clip(0, 1), color=colour, alpha=0.2, lw=0)
        ax.set_title(system, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.set_xlabel("corrections", fontsize=8)
        ax.tick_params(labelsize=8)
        if float(x.max() if len(x) else 0) <= 0:
            ax.set_xlim(-1, 1)
    for ax in axes[::ncols]:
        ax.set_ylabel("accuracy", fontsize=8)
    for ax in axes[n:]:
        ax.set_visible(False)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Recovery curves — {title}  (mean ± std over seeds)", fontsize=11)
    return fig


def scatter_figure(summary: pd.DataFrame, styles: dict, title: str) -> Figure:
    """Final novel vs final original accuracy, one point per system with ± std bars."""
    fig = Figure(figsize=(7.4, 5.0), layout="constrained")
    ax = fig.subplots()
    for _, r in summary.iterrows():
        colour, marker = styles[r["system"]]
        ax.errorbar(
            r["final_novel_mean"],
            r["final_original_mean"],
            xerr=r["final_novel_std"],
            yerr=r["final_original_std"],
            fmt=marker,
            ms=8,
            capsize=3,
            color=colour,
            label=r["system"],
            alpha=0.9,
        )
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("final novel accuracy (held-out classes)")
    ax.set_ylabel("final original accuracy (known classes)")
    ax.grid(alpha=0.3)
    fig.legend(fontsize=8, loc="outside right center", frameon=False)
    ax.set_title(f"Learning vs forgetting — {title}", fontsize=11)
    return fig


def storage_figure(storage: pd.DataFrame, styles: dict, title: str) -> Figure:
    """Memory footprint (log) vs final novel and final original accuracy, Pareto frontier dashed."""
    fig = Figure(figsize=(11.5, 4.6), layout="constrained")
    axes = fig.subplots(1, 2, sharex=True)
    x = storage[FOOTPRINT_BYTES].astype(float).to_numpy()
    for ax, col, what in ((axes[0], "final_novel", "novel"), (axes[1], "final_original", "original")):
        mean, std = storage[f"{col}_mean"].to_numpy(), storage[f"{col}_std"].to_numpy()
        for i, (_, r) in enumerate(storage.iterrows()):
            colour, marker = styles[r["system"]]
            ax.errorbar(x[i], mean[i], yerr=std[i], fmt=marker, ms=7, capsize=3, color=colour, label=r["system"])
        flags = pareto_flags(list(x), list(mean))
        front = sorted((x[i], mean[i]) for i in range(len(x)) if flags[i])
        if len(front) > 1:
            fx, fy = zip(*front)
            ax.step(fx, fy, where="post", ls="--", color="0.4", lw=1, label="Pareto frontier")
        ax.set_xscale("log")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("memory at end of stream (bytes, log scale)")
        ax.set_ylabel(f"final {what} accuracy")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="outside right center", frameon=False)
    fig.suptitle(f"Storage vs recovery — {title}", fontsize=11)
    return fig


def metric_curves_figure(
    rows: pd.DataFrame, systems: list[str], metrics: list[str], styles: dict, title: str
) -> Figure:
    """Any protocol: one panel per metric, its mean over seeds against stream items seen,
    one line per system (a finished run's last value is carried forward)."""
    n = max(1, len(metrics))
    fig = Figure(figsize=(4.2 * n, 3.4), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        for system in systems:
            own = rows[rows["system"] == system]
            if metric not in own.columns or not len(own):
                continue
            wide = own.pivot_table(index="step", columns="seed", values=metric, aggfunc="first").sort_index().ffill()
            colour, marker = styles.get(system, ("#333333", "o"))
            ax.plot(wide.index, wide.mean(axis=1), color=colour, marker=marker, markersize=3, label=system)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("stream items seen")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig
