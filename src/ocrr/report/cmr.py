"""The cmr protocol's report cell: the paper's Table 1, EFR/UKR/OKR/CSR/KG/OEC curves (its
Figure 5), per-run values (cmr_runs.csv) and the first run's stream (its Figure 3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ocrr.protocols.cmr import OEC_PARTS, SOURCE, stream_shares
from ocrr.report.figures import metric_curves_figure


def cmr_cell(protocol, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
    header, body, note = protocol.table(summary)
    curves = rows.copy()
    have = [SOURCE[x] for x in OEC_PARTS if SOURCE[x] in curves.columns]
    curves["oec"] = curves[have].mean(axis=1, skipna=False) if len(have) == 4 else np.nan
    metrics = [SOURCE[x] for x in ("efr", "ukr", "okr", "csr", "kg") if SOURCE[x] in curves.columns] + ["oec"]
    figure = metric_curves_figure(curves, list(summary["system"]), metrics, styles, title)
    caption = (
        f"EFR, UKR, OKR, CSR (online accuracy), KG and OEC against stream items seen "
        f"(as the paper's Figure 5), {title}: mean over runs."
    )
    return [(title, header, body, note)], [("curves", figure, caption)], {"cmr_runs": protocol.per_run(rows)}


def cmr_stream_figures(predictions: pd.DataFrame | None, title: str) -> list:
    """The cell's first stream: cluster shares per episode (the paper's Figure 3)."""
    if predictions is None or not {"episode", "cluster", "role"} <= set(predictions.columns):
        return []
    return [
        (
            "stream",
            stream_figure(predictions, f"stream of the first run, {title}"),
            f"Cluster shares per episode of the first run's stream (V0 = upstream), as the paper's Figure 3, {title}.",
        )
    ]


def stream_figure(predictions: pd.DataFrame, title: str = "CMR stream") -> Figure:
    """Stacked cluster shares per episode (upstream V0 first)."""
    shares = stream_shares(predictions)
    shares = shares[["V0"] + [c for c in shares.columns if c != "V0"]] if "V0" in shares.columns else shares
    fig = Figure(figsize=(8, 3.2), layout="constrained")
    ax = fig.subplots()
    bottom = np.zeros(len(shares))
    for col in shares.columns:
        ax.bar(shares.index + 1, shares[col], bottom=bottom, width=1.0, label=str(col))
        bottom += shares[col].to_numpy()
    ax.set_xlabel("episode")
    ax.set_ylabel("share of the episode")
    ax.legend(fontsize=6, ncol=2, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_title(title, fontsize=10)
    return fig
