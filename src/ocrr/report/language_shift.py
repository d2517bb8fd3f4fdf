"""The language-shift protocol's report cell: its table (target accuracy before any correction,
at the end, source accuracy kept, corrections to 50 / 70 %), recovery curves in the target and
the source language against corrections, and every metric against stream items seen."""

from __future__ import annotations

import pandas as pd

from ocrr.protocols.language_shift import TABLE_NOTE, table
from ocrr.report import figures as F

TARGET, SOURCE, NOVEL = F.NOVEL, F.ORIGINAL, "#2ca02c"


def language_shift_cell(protocol, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
    header, body, _ = table(summary)
    systems = list(summary["system"])
    curves = [("acc_target", TARGET, "target language"), ("acc_source", SOURCE, "source language")]
    if "acc_novel" in rows.columns and rows["acc_novel"].notna().any():
        curves.append(("acc_novel", NOVEL, "held-out intents"))
    metrics = [c[0] for c in curves]
    held_out = ", held-out intents in the target language (green)" if len(curves) > 2 else ""
    figures = [
        (
            "recovery",
            F.recovery_figure(rows, systems, title, tuple(curves)),
            f"Recovery in a new language, {title}: accuracy on the target language's test items (blue) and "
            f"the source language's (orange){held_out} against corrections applied; line = mean over seeds, "
            "band = ± 1 std.",
        ),
        (
            "curves",
            F.metric_curves_figure(rows, systems, metrics, styles, title),
            f"{', '.join(metrics)} against stream items seen, {title}: mean over seeds.",
        ),
    ]
    return [(f"Language shift — {title}", header, body, TABLE_NOTE)], figures, {}
