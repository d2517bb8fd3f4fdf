"""Report tables and figures for realistic feedback: final accuracy against the
noise rate, the delay and the budget (uncertainty vs random selection), the robust substrate
next to the plain one, and the drift protocol's table and recovery curves.

    ocrr report --feedback results/sweep-feedback --robust results/sweep-robust \\
        --drift results/sweep-drift --out docs/feedback

Each argument is a sweep folder (``ocrr sweep --config docs/feedback/<name>.toml``); any may be
left out. Cells are mean ± population std over the seeds present (their number is in the
table), final values at the end of the stream.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ocrr.engine.sweep import MAIN_SWEEP_SYSTEMS
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.report.load import load_results_any

RUN = ["policy", "system", "seed"]


def finals(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """The last checkpoint of every run."""
    return per_checkpoint.sort_values("step", kind="mergesort").groupby(RUN, sort=False).tail(1)


def axis_value(policy: str, axis: str):
    """The policy's value on one axis: noise rate, delay in items, or (budget, selection)."""
    p = make_policy(policy)
    if axis == "noise":
        return p.noise if p.noise_kind == "uniform" or p.noise == 0 else f"{p.noise:g} {p.noise_kind}"
    if axis == "delay":
        return f"geometric {p.delay:g}" if p.delay_kind == "geometric" and p.delay > 0 else int(p.delay)
    return "all" if p.budget is None else f"{p.budget:.0%} {p.select}"


def _cell(values: np.ndarray) -> str:
    values = values[np.isfinite(values)]
    if not len(values):
        return "–"
    return f"{values.mean():.3f}" + (f" ± {values.std():.3f}" if len(values) > 1 else "")


def axis_table(
    per_checkpoint: pd.DataFrame, axis: str, systems: list[str] | None = None, metrics=("acc_novel", "acc_original")
) -> pd.DataFrame:
    """Rows: systems; columns: the axis's values; cells 'novel / original' (mean ± std over seeds)."""
    last = finals(per_checkpoint).copy()
    last["value"] = [axis_value(p, axis) for p in last["policy"]]
    if axis == "budget":
        last["corrections"] = last["corrections"].astype(float)
    order = sorted(
        last["value"].unique(), key=lambda v: (isinstance(v, str) and v != "all", str(v) if isinstance(v, str) else v)
    )
    systems = [s for s in (systems or list(dict.fromkeys(last["system"]))) if s in set(last["system"])]
    rows = []
    for system in systems:
        row = {"system": system}
        for value in order:
            cell = last[(last["system"] == system) & (last["value"] == value)]
            parts = [_cell(cell[m].to_numpy(float)) for m in metrics]
            if axis in ("budget", "delay"):  # what was learned from, and (delay) what users saw meanwhile
                parts.append(f"{cell['corrections'].mean():.0f} corr." if len(cell) else "–")
            row[_header(axis, value)] = " / ".join(parts)
        rows.append(row)
    return pd.DataFrame(rows)


def _header(axis: str, value) -> str:
    if axis == "noise":
        return f"noise {value}" if isinstance(value, str) else f"noise {value:g}"
    if axis == "delay":
        return f"delay {value}"
    return f"budget {value}"


def axis_figure(per_checkpoint: pd.DataFrame, axis: str, systems: list[str], title: str) -> Figure:
    """Final novel (left) and original (right) accuracy against a numeric axis, a line per system."""
    last = finals(per_checkpoint).copy()
    last["value"] = [axis_value(p, axis) for p in last["policy"]]
    last = last[[not isinstance(v, str) for v in last["value"]]]
    xlabel = {"noise": "label noise rate", "delay": "delay (stream items)"}[axis]
    return _two_panels(
        last, "value", ("acc_novel", "acc_original"), systems, title, xlabel, "final ", "o", symlog=axis == "delay"
    )


def _two_panels(
    data: pd.DataFrame,
    x: str,
    metrics: tuple[str, str],
    systems: list[str],
    title: str,
    xlabel: str,
    ylabel_prefix: str = "",
    marker: str | None = None,
    symlog: bool = False,
) -> Figure:
    """One panel per metric, a line per system: the metric's mean over seeds against ``x``."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, metric in zip(axes, metrics):
        for system in systems:
            line = data[data["system"] == system].groupby(x)[metric].mean()
            if len(line):
                ax.plot(line.index, line.to_numpy(), marker=marker, label=system)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{ylabel_prefix}{metric.removeprefix('acc_')} accuracy")
        if symlog:
            ax.set_xscale("symlog", linthresh=50)
        ax.set_ylim(0, 1)
    axes[1].legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    return fig


def budget_figure(per_checkpoint: pd.DataFrame, systems: list[str], title: str) -> Figure:
    """Final novel accuracy per system at each budget, uncertainty next to random selection."""
    last = finals(per_checkpoint).copy()
    last["value"] = [axis_value(p, "budget") for p in last["policy"]]
    values = [
        v for v in ("10% random", "10% uncertainty", "50% random", "50% uncertainty", "all") if v in set(last["value"])
    ]
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(len(values), 1)
    for j, value in enumerate(values):
        means = [last[(last["system"] == s) & (last["value"] == value)]["acc_novel"].mean() for s in systems]
        ax.bar(np.arange(len(systems)) + j * width, means, width, label=value)
    ax.set_xticks(np.arange(len(systems)) + 0.4 - width / 2, systems, rotation=30, fontsize=8)
    ax.set_ylabel("final novel accuracy")
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    return fig


def drift_table(
    per_checkpoint: pd.DataFrame, systems: list[str] | None = None, thresholds=(0.7, 0.8, 0.9)
) -> pd.DataFrame:
    """Per system: drifted accuracy before and after the stream, stable accuracy after, online
    accuracy, and the corrections until drifted accuracy first reached each threshold."""
    rows = []
    systems = [
        s for s in (systems or list(dict.fromkeys(per_checkpoint["system"]))) if s in set(per_checkpoint["system"])
    ]
    for system in systems:
        runs = per_checkpoint[per_checkpoint["system"] == system].sort_values("step", kind="mergesort")
        first = runs.groupby("seed").head(1)
        last = runs.groupby("seed").tail(1)
        row = {
            "system": system,
            "seeds": runs["seed"].nunique(),
            "drifted before": _cell(first["acc_drifted"].to_numpy(float)),
            "drifted after": _cell(last["acc_drifted"].to_numpy(float)),
            "stable after": _cell(last["acc_stable"].to_numpy(float)),
            "online acc": _cell(last["online_accuracy"].to_numpy(float)),
        }
        for t in thresholds:
            reached = []
            for _, run in runs.groupby("seed"):
                hit = run[run["acc_drifted"] >= t]
                reached.append(float(hit["corrections"].iloc[0]) if len(hit) else math.nan)
            got = [r for r in reached if np.isfinite(r)]
            row[f"→{t:.0%}"] = (
                "never"
                if not got
                else f"{np.mean(got):.0f}" + (f" ({len(got)}/{len(reached)})" if len(got) < len(reached) else "")
            )
        row["corrections"] = f"{last['corrections'].mean():.0f}"
        rows.append(row)
    return pd.DataFrame(rows)


def drift_figure(per_checkpoint: pd.DataFrame, systems: list[str], title: str) -> Figure:
    """Drifted (left) and stable (right) accuracy against stream items seen, mean over seeds."""
    return _two_panels(per_checkpoint, "step", ("acc_drifted", "acc_stable"), systems, title, "stream items seen")


def markdown(frame: pd.DataFrame, title: str, note: str) -> str:
    cols = list(frame.columns)
    lines = [f"## {title}", "", "| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for _, r in frame.iterrows()]
    return "\n".join(lines + ["", note, ""])


AXES = {"noise": lambda p: p.noise > 0, "delay": lambda p: p.delay > 0, "budget": lambda p: p.budget is not None}
AXIS_NOTES = {
    "noise": "final novel / final original.",
    "budget": "final novel / final original / corrections applied.",
    "delay": "final novel / final original / corrections delivered.",
}


def axis_tables(per_checkpoint: pd.DataFrame, systems: list[str]) -> list[tuple[str, pd.DataFrame, str]]:
    """For ``ocrr report``: per dataset and per feedback axis some policy sets, the axis table
    over the policies that set it and the plain ones (the axis's zero), as (title, table, note)."""
    out = []
    for dataset, frame in per_checkpoint.groupby("dataset", sort=True):
        policies = {p: make_policy(p) for p in frame["policy"].unique()}
        for axis, on in AXES.items():
            chosen = [name for name, p in policies.items() if on(p) or not p.realistic]
            if not any(on(policies[name]) for name in chosen):
                continue
            part = frame[frame["policy"].isin(chosen)]
            n = part["seed"].nunique()
            note = (
                f"Final values after the stream, mean ± population std over up to {n} seed(s); cells: "
                + AXIS_NOTES[axis]
            )
            out.append((f"{dataset}: final accuracy vs {axis}", axis_table(part, axis, systems), note))
    return out


def write_report(
    out: Path, feedback: Path | None = None, robust: Path | None = None, drift: Path | None = None
) -> list[Path]:
    # Every sweep is read and checked before anything is written: a wrong folder replaces no
    # figure of the report (its default output is the documentation's own folder).
    frames = {
        name: _checked_sweep(name, folder)
        for name, folder in (("feedback", feedback), ("robust", robust), ("drift", drift))
        if folder is not None
    }
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(name: str, text: str, figures=()):
        path = out / f"{name}.md"
        path.write_text(text, encoding="utf-8")
        written.append(path)
        for fname, fig in figures:
            fig.savefig(out / f"{fname}.png", dpi=110)
            written.append(out / f"{fname}.png")

    seeds_note = (
        "Final values after the whole stream, mean ± population std over the seeds ({n} at most; a cell without ± "
        "has one); Banking77, held-out protocol."
    )
    if "feedback" in frames:
        df = frames["feedback"]
        n = df["seed"].nunique()
        pieces = []
        figures = []
        for axis, keep, title in (
            ("noise", lambda p: make_policy(p).noise > 0 or not make_policy(p).realistic, "noise"),
            ("delay", lambda p: make_policy(p).delay > 0 or not make_policy(p).realistic, "delay"),
            ("budget", lambda p: make_policy(p).budget is not None or not make_policy(p).realistic, "budget"),
        ):
            part = df[[keep(p) for p in df["policy"]]]
            metrics = ("acc_novel", "acc_original") + (("online_accuracy",) if axis == "delay" else ())
            table = axis_table(part, axis, MAIN_SWEEP_SYSTEMS, metrics)
            note = (
                seeds_note.format(n=n)
                + " Cells: final novel / final original"
                + {
                    "budget": " / corrections applied.",
                    "delay": " / online accuracy (of the stream predictions) / corrections delivered; corrections "
                    "still in flight when the stream ends are never delivered.",
                    "noise": ".",
                }[axis]
            )
            pieces.append(markdown(table, f"Final accuracy vs {title}", note))
            if axis in ("noise", "delay"):
                figures.append(
                    (
                        f"{axis}",
                        axis_figure(part, axis, MAIN_SWEEP_SYSTEMS, f"Banking77, oracle, final accuracy vs {axis}"),
                    )
                )
            else:
                figures.append(
                    ("budget", budget_figure(part, MAIN_SWEEP_SYSTEMS, "Banking77, final novel accuracy by budget"))
                )
        save(
            "feedback-tables",
            "# Realistic feedback: Banking77, held-out protocol, oracle\n\n" + "\n".join(pieces),
            figures,
        )
    if "robust" in frames:
        df = frames["robust"]
        table = axis_table(df, "noise", ["substrate", "robust_substrate"])
        save(
            "robust-tables",
            "# The robust substrate under label noise\n\n"
            + markdown(table, "Final novel / original vs label noise", seeds_note.format(n=df["seed"].nunique())),
        )
    if "drift" in frames:
        df = frames["drift"]
        table = drift_table(df, MAIN_SWEEP_SYSTEMS)
        note = (
            "Banking77, drift protocol (3 k-means clusters per class, one per class streamed), oracle. Drifted: "
            "test items of the streamed clusters; stable: the rest. →N%: corrections until drifted accuracy "
            "first reached N % (checkpoints every 50 items; (r/n): only r of n seeds did)."
        )
        save(
            "drift-tables",
            "# Within-class drift\n\n" + markdown(table, "Drift protocol", note),
            [
                (
                    "drift-recovery",
                    drift_figure(df, MAIN_SWEEP_SYSTEMS, "Banking77, drift protocol, oracle: mean over seeds"),
                )
            ],
        )
    return written


def _checked_sweep(name: str, folder: Path) -> pd.DataFrame:
    """The per-checkpoint results of the sweep given as ``--name``, if they are of that
    sweep's kind (docs/feedback/<name>.toml); else one error naming the fix."""
    df = load_results_any(folder).per_checkpoint
    policies = [make_policy(p) for p in dict.fromkeys(df["policy"])]
    if name == "feedback":
        kind_ok = any(p.realistic for p in policies)
        wanted = "runs under noisy, delayed or budgeted feedback"
    elif name == "robust":
        kind_ok = "robust_substrate" in set(df["system"]) and any(p.noise > 0 for p in policies)
        wanted = "runs of the robust_substrate system under label noise"
    else:
        kind_ok = "drift" in set(df["protocol"])
        wanted = "runs of the drift protocol"
    if not kind_ok:
        raise OcrrError(
            f"--{name} {folder}: this sweep holds no {wanted}; give the folder of the sweep of "
            f"docs/feedback/{name}.toml (ocrr sweep --config docs/feedback/{name}.toml)"
        )
    return df


# Its command line is ``ocrr report --feedback … --robust … --drift …`` now (the CLI's job).
MOVED_COMMAND = (
    "python -m ocrr.report.feedback has moved: run `ocrr report --feedback SWEEP --robust SWEEP --drift SWEEP "
    "--out FOLDER` instead (the same options)"
)


def main(argv=None) -> int:
    """Moved: this report's command line is ``ocrr report --feedback … --robust … --drift …``."""
    raise OcrrError(MOVED_COMMAND)


if __name__ == "__main__":
    raise SystemExit(MOVED_COMMAND)
