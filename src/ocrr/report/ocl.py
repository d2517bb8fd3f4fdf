"""The ocl protocol's report cell: per stream, online accuracy, near-future accuracy at S and
retention for every system (its numbers: ocrr.protocols.ocl); online vs near-future accuracy
over time; the retention curve; and the blind classifier's A*(S) curve (``ocrr calibrate-shift``).

Inputs are tidy tables (one row per run x checkpoint), never objects.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ocrr.protocols.ocl import PAST, ocl_per_run, ocl_table


def online_vs_near_future_figure(rows: pd.DataFrame, systems: list[str], styles: dict, title: str) -> Figure:
    """Running online (solid) and near-future (dashed) accuracy against items seen, mean over runs."""
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    ax = fig.subplots()
    for system in systems:
        own = rows[rows["system"] == system]
        colour, marker = styles.get(system, ("#333333", "o"))
        for metric, style in (("online_accuracy", "-"), ("near_future_accuracy", "--")):
            if metric not in own.columns:
                continue
            wide = own.pivot_table(index="step", columns="seed", values=metric, aggfunc="first").sort_index().ffill()
            ax.plot(
                wide.index,
                wide.mean(axis=1),
                style,
                color=colour,
                marker=marker,
                markersize=3,
                label=system if metric == "online_accuracy" else None,
            )
    _finish(ax, "stream items seen", "running accuracy", f"{title}: online (solid) vs near-future (dashed)")
    return fig


def retention_curve_figure(runs: pd.DataFrame, systems: list[str], styles: dict, title: str) -> Figure:
    """The final state's accuracy on the first q % of the time-ordered test stream, mean over runs."""
    fig = Figure(figsize=(6.5, 3.6), layout="constrained")
    ax = fig.subplots()
    curve = sorted(c for c in runs.columns if c.startswith(PAST))
    qs = [int(c[len(PAST) :]) for c in curve]
    for system in systems:
        own = runs[runs["system"] == system]
        if not len(own) or not curve:
            continue
        colour, marker = styles.get(system, ("#333333", "o"))
        ax.plot(qs, own[curve].mean(axis=0).to_numpy(), color=colour, marker=marker, markersize=3, label=system)
    _finish(ax, "first q % of the test stream (time order)", "accuracy of the final state", f"{title}: retention curve")
    return fig


def _finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    """Axes of an accuracy figure: labels, [0, 1], grid, the legend outside on the right."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title, fontsize=10)


def shift_of(rows: pd.DataFrame, default: int | None = None) -> int | None:
    """The near-future shift the runs of a cell were made with (from their protocol options)."""
    if "protocol_options" not in rows.columns:
        return default
    shifts = {json.loads(o).get("shift") for o in rows["protocol_options"].dropna().unique()}
    return shifts.pop() if len(shifts) == 1 else default


def ocl_cell(protocol, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
    shift = shift_of(rows, protocol.shift)
    header, body, note = ocl_table(summary, shift)
    systems = list(summary["system"])
    runs = ocl_per_run(rows)
    figures = [
        (
            "online_vs_near_future",
            online_vs_near_future_figure(rows, systems, styles, title),
            f"Running online accuracy (solid) and near-future accuracy at S={shift} (dashed) against "
            f"stream items seen, {title}: mean over runs.",
        ),
        (
            "retention_curve",
            retention_curve_figure(runs, systems, styles, title),
            f"Retention curve, {title}: the final state's accuracy on the first q % of the time-ordered test "
            "stream, mean over runs.",
        ),
    ]
    return [(title, header, body, note)], figures, {"ocl_runs": runs}


def blind_curve_figure(curve: pd.DataFrame, chance: float, shift: int | None, title: str) -> Figure:
    """A*(S) (best k per S) and the accuracy of every k against S (log2 axis), the chance line
    max(majority, 1/C) and its +0.01 band, and S*."""
    fig = Figure(figsize=(6.5, 3.8), layout="constrained")
    ax = fig.subplots()
    xs = curve["shift"].to_numpy()
    x = np.where(xs == 0, 0.5, xs)  # S=0 drawn at 0.5 on the log axis
    for _, own in curve.groupby("k"):
        ax.plot(np.where(own["shift"] == 0, 0.5, own["shift"]), own["accuracy"], color="#999999", lw=0.6)
    best = curve.groupby("shift", sort=True)["accuracy"].max()
    ax.plot(np.where(best.index == 0, 0.5, best.index), best.to_numpy(), "o-", color="#1f77b4", label="A*(S)")
    ax.axhline(chance, color="#d95f02", ls="--", lw=1, label=f"chance {chance:.3f}")
    ax.axhline(chance + 0.01, color="#d95f02", ls=":", lw=1, label="chance + 0.01")
    if shift is not None:
        ax.axvline(shift if shift else 0.5, color="#2ca02c", lw=1, label=f"S* = {shift}")
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(x) / 1.3, max(x) * 1.3)
    ax.set_xlabel("shift S (items; 0 drawn at 0.5)")
    ax.set_ylabel("blind near-future accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    return fig
