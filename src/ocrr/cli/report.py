"""``ocrr report``: tables, figures and report.html from a sweep or run folder."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from ocrr.cli.common import add_command, console
from ocrr.cli.paths import output_folder
from ocrr.report import build_report

# (each registers its folder section: `ocrr report` on a --preset cmr / --preset encoders folder)
from ocrr.studies import cmr_preset, encoder_swap  # noqa: F401


def add_parser(sub) -> None:
    p = add_command(sub, "report", run, help="tables, figures and report.html from a sweep or run folder")
    p.add_argument("results", type=Path, help="a sweep folder, an ocrr run folder, or a results .parquet/.csv")
    p.add_argument("--out", type=Path, default=None, help="output folder (default RESULTS/report)")


def run(args) -> int:
    if args.out is not None:
        output_folder(args.out)
    report = build_report(args.results, args.out)
    screen = console()
    for title in report.tables:
        screen.print(f"  {escape(title)}", highlight=False)  # "[stream=0]" is text, not markup
    screen.print(
        f"{len(report.tables)} tables and {len(report.figures)} figure files in {report.out}/; open {report.html}",
        highlight=False,
    )
    return 0
