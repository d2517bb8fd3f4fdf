"""The held-out protocol's report cell: the paper's Table 1, the storage Pareto table, recovery
curves, final novel vs original, and the storage Pareto figure."""

from __future__ import annotations

import pandas as pd

from ocrr.protocols.heldout import TABLE_HEADER, table_rows
from ocrr.report import figures as F
from ocrr.report.tables import STORAGE_HEADER, storage_rows, storage_table

TABLE1_NOTE = (
    "Final accuracies: mean ± std (population) over seeds at the end of the stream. →N%: corrections "
    "applied when novel accuracy first reached N % (mean over the seeds that reached it; '(r/n)' when "
    "only r of n seeds did; 'never' when none did). Buffer: retrieval entries + trainable parameters."
)
STORAGE_NOTE = (
    "Memory at the end of the stream (retrieval entries and trainable parameters, in bytes), smallest "
    "first. Pareto (novel): no system with at most this memory reaches a higher final novel accuracy; "
    "Pareto (original): likewise for final original accuracy."
)


def heldout_cell(protocol, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
    tables = [(f"Table 1 — {title}", TABLE_HEADER, table_rows(summary), TABLE1_NOTE)]
    systems = list(summary["system"])
    figures = [
        (
            "recovery",
            F.recovery_figure(rows, systems, title),
            f"Recovery curves, {title}: novel (blue) and original (orange) accuracy vs corrections "
            "applied; line = mean over seeds at each checkpoint, band = ± 1 std.",
        ),
        (
            "scatter",
            F.scatter_figure(summary, styles, title),
            f"Final novel vs final original accuracy, {title} (± 1 std bars), as the paper's "
            "Figures 4-5. Upper right: learns the new classes without forgetting the old ones.",
        ),
    ]
    storage = storage_table(summary)
    frames = {"storage": storage} if len(storage) > 1 else {}
    if len(storage) > 1:
        tables.append((f"Storage Pareto — {title}", STORAGE_HEADER, storage_rows(storage), STORAGE_NOTE))
        figures.append(
            (
                "storage",
                F.storage_figure(storage, styles, title),
                f"Memory footprint vs final novel (left, as the paper's Figure 1) and final original "
                f"accuracy (right), {title}; dashed: Pareto frontier, ± 1 std bars.",
            )
        )
    return tables, figures, frames
