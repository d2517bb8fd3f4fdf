"""``ocrr report``: tables, figures and one HTML page from results files.

Reads a sweep folder, an ``ocrr run`` folder, a results table (see ocrr.report.load) or the
folder of ``ocrr sweep --preset cmr`` (its test stage, with the picks and Table 2), and writes
into ``out``::

    tables.md        per (protocol, dataset, encoder, policy) cell, the protocol's tables (held-out:
                     the paper's Table 1, then its storage Pareto table)
    summary.csv      every cell's summary (held-out: Table 1 numbers), with online accuracy
    runs.csv         one row per run: final values (held-out: and corrections to 10/50/70 %)
    <name>.csv       a protocol's own tables (held-out: storage.csv, with Pareto flags)
    (tables.md and report.html also get one table per realistic-feedback axis, noise, delay or
    budget, that some policy of the folder sets: final accuracy per system across those policies)
    figures/<cell>_<kind>.{png,svg}   held-out: recovery, scatter, storage; others: curves
    report.html      all of the above in one self-contained page

Each protocol's cells are drawn by its presentation, registered here by protocol name (the
held-out, ocl, cmr and language-shift ones below; any other protocol gets its main table and curves), and a
study with a folder of its own registers a folder section (ocrr.report.presentation);
everything is computed from the tidy per-checkpoint table, never from live objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ocrr.engine.results import markdown, write_csv
from ocrr.protocols import PROTOCOLS
from ocrr.protocols.heldout import SUMMARY_COLUMNS
from ocrr.protocols.summary import RUN_KEYS
from ocrr.report import figures as F
from ocrr.report.cmr import cmr_cell, cmr_stream_figures
from ocrr.report.feedback import axis_tables
from ocrr.report.heldout import heldout_cell
from ocrr.report.html import Section, render
from ocrr.report.language_shift import language_shift_cell
from ocrr.report.load import first_run_predictions, load_predictions, load_results_any
from ocrr.report.ocl import ocl_cell
from ocrr.report.presentation import (
    FolderSection,
    folder_section_for,
    presentation_for,
    register_folder_section,
    register_presentation,
)
from ocrr.report.tables import cell_rows, cell_summary, cells, order_systems, seeds_text

register_presentation("heldout", heldout_cell)
register_presentation("ocl", ocl_cell)
register_presentation("cmr", cmr_cell, cmr_stream_figures)
register_presentation("language_shift", language_shift_cell)


@dataclass
class Report:
    out: Path
    files: list[Path] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # titles, in order
    html: Path | None = None


def build_report(source: str | Path, out: str | Path | None = None) -> Report:
    source = Path(source)
    study = folder_section_for(source)  # e.g. --preset cmr: its test stage, plus the picks and Table 2
    loaded = load_results_any(study.runs(source) if study else source)
    per = loaded.per_checkpoint
    out = Path(out) if out else (source if source.is_dir() else source.parent) / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    all_systems = order_systems(per["system"].unique())
    styles = F.system_styles(all_systems)

    md = ["# OCRR report", "", _meta_line(loaded, per), ""]
    summaries, runs, sections = [], [], []
    extras: dict[str, list[pd.DataFrame]] = {}
    predictions = None  # read once, when a protocol draws its stream
    for cell in cells(per):
        protocol = PROTOCOLS[cell.protocol]()
        rows = cell_rows(per, cell)
        summary = cell_summary(rows, protocol)
        summaries.append(summary.assign(protocol=cell.protocol))
        runs.append(protocol.per_run(rows).assign(protocol=cell.protocol))
        title = f"{cell.title} · seeds {seeds_text(rows)}"
        presentation = presentation_for(cell.protocol)
        tables, figures, frames = presentation.cell(protocol, rows, summary, title, styles)
        stream = presentation.stream or getattr(protocol, "stream_figures", None)  # or an older plug-in's own
        if stream is not None:  # a picture of the stream itself, from its per-item log
            if predictions is None:
                predictions = load_predictions(loaded)
            figures = figures + stream(first_run_predictions(predictions, rows), title)
        section = Section(cell.title, cell.slug)
        for table_title, header, body, note in tables:
            md.append(markdown(table_title, header, body, note))
            section.tables.append((table_title, header, body, note))
            report.tables.append(table_title)
        for name, frame in frames.items():
            extras.setdefault(name, []).append(frame)
        for kind, fig, caption in figures:
            png, svg = F.save(fig, out / "figures" / f"{cell.slug}_{kind}")
            report.figures += [png, svg]
            section.figures.append((caption, svg))
        sections.append(section)

    if study:
        section = Section(study.title, study.slug)
        for table in study.tables(source):
            md.append(markdown(*table))
            section.tables.append(table)
            report.tables.append(table[0])
        sections.append(section)
    feedback = _feedback_section(per, all_systems)  # realistic feedback: one table per axis, across policies
    if feedback is not None:
        sections.append(feedback)
        for table_title, header, body, note in feedback.tables:
            md.append(markdown(table_title, header, body, note))
            report.tables.append(table_title)
    report.files.append(_write(out / "tables.md", "\n".join(md)))
    write_csv(pd.concat(summaries, ignore_index=True), out / "summary.csv", ["protocol"] + SUMMARY_COLUMNS)
    write_csv(pd.concat(runs, ignore_index=True), out / "runs.csv", ["protocol"] + RUN_KEYS)
    report.files += [out / "summary.csv", out / "runs.csv"]
    for name, frames in extras.items():  # a protocol's own tables, e.g. the held-out storage Pareto
        write_csv(pd.concat(frames, ignore_index=True), out / f"{name}.csv", [])
        report.files.append(out / f"{name}.csv")
    page = render("OCRR report", [_meta_line(loaded, per)], sections)
    report.html = _write(out / "report.html", page)
    report.files.append(report.html)
    return report


def _feedback_section(per: pd.DataFrame, systems: list[str]) -> Section | None:
    tables = axis_tables(per, systems)
    if not tables:
        return None
    section = Section("Realistic feedback: final accuracy per axis", "feedback-axes")
    for title, frame, note in tables:
        section.tables.append((title, list(frame.columns), frame.astype(str).to_numpy().tolist(), note))
    return section


def _meta_line(loaded, per: pd.DataFrame) -> str:
    runs = per[RUN_KEYS].drop_duplicates()
    kind = {"sweep": "sweep folder", "run": "ocrr run folder", "file": "results file"}[loaded.source]
    name = loaded.path.name + ("/" if loaded.path.is_dir() else "")
    return (
        f"Source: {kind} {name} — {len(runs)} runs, {len(per)} checkpoints; "
        f"datasets {', '.join(sorted(per['dataset'].unique()))}; "
        f"policies {', '.join(sorted(per['policy'].unique()))}; "
        f"seeds {', '.join(str(s) for s in sorted(per['seed'].unique()))}."
    )


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


__all__ = ["FolderSection", "Report", "build_report", "register_folder_section", "register_presentation"]
