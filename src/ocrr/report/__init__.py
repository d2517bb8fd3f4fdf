"""``ocrr report``: tables, figures and one HTML page from results files.

Reads a sweep folder, an ``ocrr run`` folder or a results table (see ocrr.report.load)
and writes into ``out``::

    tables.md        Table 1 per (dataset, encoder, policy) cell, then its storage Pareto table
    summary.csv      every cell's Table 1 numbers
    runs.csv         one row per run: final accuracies, corrections to 10/50/70 %
    storage.csv      every cell's storage table, with Pareto flags
    figures/<cell>_{recovery,scatter,storage}.{png,svg}
    report.html      all of the above in one self-contained page

Everything is computed from the tidy per-checkpoint table, never from live objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ocrr.metrics import per_run
from ocrr.report import figures as F
from ocrr.report.html import Section, render
from ocrr.report.load import load_results_any
from ocrr.report.tables import (STORAGE_HEADER, cell_rows, cell_summary, cells, order_systems, seeds_text,
                                storage_markdown, storage_rows, storage_table, table1_markdown)
from ocrr.results import SUMMARY_COLUMNS, TABLE_HEADER, table_rows, write_csv

TABLE1_NOTE = ("Final accuracies: mean ± std (population) over seeds at the end of the stream. →N%: corrections "
               "applied when novel accuracy first reached N % (mean over the seeds that reached it; '(r/n)' when "
               "only r of n seeds did; 'never' when none did). Buffer: retrieval entries + trainable parameters.")
STORAGE_NOTE = ("Memory at the end of the stream (retrieval entries and trainable parameters, in bytes), smallest "
                "first. Pareto (novel): no system with at most this memory reaches a higher final novel accuracy; "
                "Pareto (original): likewise for final original accuracy.")


@dataclass
class Report:
    out: Path
    files: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # titles, in order
    html: Path | None = None


def build_report(source: str | Path, out: str | Path | None = None) -> Report:
    loaded = load_results_any(source)
    per = loaded.per_checkpoint
    source = Path(source)
    out = Path(out) if out else (source if source.is_dir() else source.parent) / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    all_systems = order_systems(per["system"].unique())
    styles = F.system_styles(all_systems)

    md = ["# OCRR report", "", _meta_line(loaded, per), ""]
    summaries, storages, sections = [], [], []
    for cell in cells(per):
        rows = cell_rows(per, cell)
        summary = cell_summary(rows)
        summaries.append(summary)
        seeds = seeds_text(rows)
        t1_title = f"Table 1 — {cell.title} · seeds {seeds}"
        section = Section(cell.title, cell.slug)
        md.append(table1_markdown(summary, cell, seeds))
        section.tables.append((t1_title, TABLE_HEADER, table_rows(summary), TABLE1_NOTE))
        report.tables.append(t1_title)

        storage = storage_table(summary)
        if len(storage) > 1:
            storages.append(storage)
            st_title = f"Storage Pareto — {cell.title}"
            md.append(storage_markdown(storage, st_title))
            section.tables.append((st_title, STORAGE_HEADER, storage_rows(storage), STORAGE_NOTE))
            report.tables.append(st_title)

        systems = [s for s in all_systems if s in set(summary["system"])]
        stem = out / "figures" / cell.slug
        plots = [("recovery", F.recovery_figure(rows, systems, cell.title),
                  f"Recovery curves, {cell.title}: novel (blue) and original (orange) accuracy vs corrections "
                  "applied; line = mean over seeds at each checkpoint, band = ± 1 std."),
                 ("scatter", F.scatter_figure(summary, styles, cell.title),
                  f"Final novel vs final original accuracy, {cell.title} (± 1 std bars), as the paper's "
                  "Figures 4-5. Upper right: learns the new classes without forgetting the old ones.")]
        if len(storage) > 1:
            plots.append(("storage", F.storage_figure(storage, styles, cell.title),
                          f"Memory footprint vs final novel (left, as the paper's Figure 1) and final original "
                          f"accuracy (right), {cell.title}; dashed: Pareto frontier, ± 1 std bars."))
        for kind, fig, caption in plots:
            png, svg = F.save(fig, stem.parent / f"{stem.name}_{kind}")
            report.figures += [png, svg]
            section.figures.append((caption, svg))
        sections.append(section)

    report.files.append(_write(out / "tables.md", "\n".join(md)))
    summary_all = pd.concat(summaries, ignore_index=True)
    write_csv(summary_all, out / "summary.csv", SUMMARY_COLUMNS)
    write_csv(per_run(per), out / "runs.csv", ["dataset", "encoder", "policy", "system", "seed"])
    storage_all = pd.concat(storages, ignore_index=True) if storages else pd.DataFrame()
    write_csv(storage_all, out / "storage.csv", [])
    report.files += [out / "summary.csv", out / "runs.csv", out / "storage.csv"]
    page = render("OCRR report", [_meta_line(loaded, per)], sections)
    report.html = _write(out / "report.html", page)
    report.files.append(report.html)
    return report


def _meta_line(loaded, per: pd.DataFrame) -> str:
    runs = per[["dataset", "encoder", "policy", "system", "seed"]].drop_duplicates()
    kind = {"sweep": "sweep folder", "run": "ocrr run folder", "file": "results file"}[loaded.source]
    name = loaded.path.name + ("/" if loaded.path.is_dir() else "")
    return (f"Source: {kind} {name} — {len(runs)} runs, {len(per)} checkpoints; "
            f"datasets {', '.join(sorted(per['dataset'].unique()))}; "
            f"policies {', '.join(sorted(per['policy'].unique()))}; "
            f"seeds {', '.join(str(s) for s in sorted(per['seed'].unique()))}.")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


__all__ = ["Report", "build_report"]
