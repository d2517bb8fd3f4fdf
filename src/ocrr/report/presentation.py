"""How ``ocrr report`` draws things it does not own: plug-ins registered by name.

* A protocol's **presentation**: the tables, figures and extra CSV tables of one report cell
  (dataset, encoder, policy), registered under the protocol's name. The protocols know
  nothing of the report; the held-out, ocl and cmr presentations register in
  ``ocrr.report``. A protocol without one (drift, or yours) gets ``default_cell``: its main
  table (``Protocol.table``) and one curve per metric.
* A study's **folder section**: a folder layout of its own (say ``ocrr sweep --preset cmr``:
  picks.json beside test/) that the report recognises, reads the runs of, and closes with a
  section of the study's own tables. The study registers it (``register_folder_section``).

A cell function is ``cell(protocol, rows, summary, title, styles) -> (tables, figures, frames)``:
tables ``[(title, header, rows, note)]``, figures ``[(kind, Figure, caption)]``, frames
``{name: DataFrame}``. A stream function is ``stream(predictions, title) -> figures``, given the
per-item log of the cell's first run (or None when there is none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ocrr.errors import OcrrError
from ocrr.registry import Registry
from ocrr.report.figures import metric_curves_figure


@dataclass(frozen=True)
class Presentation:
    cell: Callable
    stream: Callable | None = None  # a picture of the stream itself, from the per-item log


def default_cell(protocol, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
    """The main table and every metric's curves (online accuracy too, when measured)."""
    if hasattr(protocol, "report_cell"):  # written before presentations were plug-ins: say how to port it
        raise OcrrError(
            f"the protocol {protocol.name!r} draws its report cells with a report_cell method, which ocrr report "
            "no longer calls: register it as a presentation instead, "
            f"ocrr.report.presentation.register_presentation({protocol.name!r}, cell) with "
            "cell(protocol, rows, summary, title, styles)"
        )
    header, body, note = protocol.table(summary)
    metrics = [m for m in protocol.metrics if m in rows.columns] + (
        ["online_accuracy"] if "online_accuracy" in rows.columns else []
    )
    figure = metric_curves_figure(rows, list(summary["system"]), metrics, styles, title)
    return (
        [(title, header, body, note)],
        [("curves", figure, f"{', '.join(metrics)} against stream items seen, {title}: mean over seeds.")],
        {},
    )


PRESENTATIONS: Registry[Presentation] = Registry("presentation", hint="Register one with register_presentation.")
DEFAULT = Presentation(default_cell)


def register_presentation(protocol_name: str, cell: Callable, stream: Callable | None = None) -> None:
    """Draw the cells of ``protocol_name`` with ``cell`` (and its stream with ``stream``)."""
    PRESENTATIONS.register(protocol_name, Presentation(cell, stream))


def presentation_for(protocol_name: str) -> Presentation:
    return PRESENTATIONS.get(protocol_name, DEFAULT)


@dataclass(frozen=True)
class FolderSection:
    title: str
    slug: str
    detect: Callable[[Path], bool]  # is this folder one of the study's?
    runs: Callable[[Path], Path]  # where its runs are (a sweep folder)
    tables: Callable[[Path], list]  # its own tables: [(title, header, rows, note)]


# slug -> section, in the order they were registered (the first that recognises a folder wins)
FOLDER_SECTIONS: Registry[FolderSection] = Registry("folder section", hint="Register one with register_folder_section.")


def register_folder_section(section: FolderSection) -> None:
    FOLDER_SECTIONS.pop(section.slug, None)  # registered again: it moves last, as it always did
    FOLDER_SECTIONS.register(section.slug, section)


def folder_section_for(folder: Path) -> FolderSection | None:
    return next((s for s in FOLDER_SECTIONS.values() if folder.is_dir() and s.detect(folder)), None)
