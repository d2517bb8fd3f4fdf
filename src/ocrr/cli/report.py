"""``ocrr report``: tables, figures and report.html from a sweep or run folder; with
``--feedback``/``--robust``/``--drift``, the realistic-feedback report of those sweeps."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from ocrr.cli.common import add_command, console
from ocrr.cli.paths import output_folder, output_path
from ocrr.errors import OcrrError
from ocrr.report import build_report
from ocrr.report.feedback import write_report as write_feedback_report

# (each registers its folder section: `ocrr report` on a --preset cmr / --preset encoders folder)
from ocrr.studies import cmr_preset, encoder_swap  # noqa: F401

FEEDBACK_SWEEPS = ("feedback", "robust", "drift")  # the realistic-feedback report's sweeps (docs/feedback/)


def add_parser(sub) -> None:
    p = add_command(sub, "report", run, help="tables, figures and report.html from a sweep or run folder")
    p.add_argument(
        "results", type=Path, nargs="?", help="a sweep folder, an ocrr run folder, or a results .parquet/.csv"
    )
    p.add_argument(
        "--out",
        type=output_path,
        default=None,
        help="output folder (default RESULTS/report; docs/feedback with --feedback …)",
    )
    for name in FEEDBACK_SWEEPS:
        p.add_argument(
            f"--{name}",
            type=Path,
            default=None,
            metavar="SWEEP",
            help=f"instead of RESULTS: the realistic-feedback report, from the sweep of docs/feedback/{name}.toml",
        )


def run(args) -> int:
    if any(getattr(args, name) is not None for name in FEEDBACK_SWEEPS):
        return _feedback_report(args)
    if args.results is None:
        raise OcrrError(
            "ocrr report needs a results folder (ocrr report RESULTS) or the sweeps of the realistic-feedback "
            "report (ocrr report --feedback SWEEP --robust SWEEP --drift SWEEP)"
        )
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


def _feedback_report(args) -> int:
    if args.results is not None:
        raise OcrrError(
            f"give either a results folder ({args.results}) or --feedback/--robust/--drift sweeps, not both: "
            "run ocrr report once for each"
        )
    for name in FEEDBACK_SWEEPS:
        sweep = getattr(args, name)
        if sweep is not None and not sweep.is_dir():
            raise OcrrError(f"--{name} {sweep}: no such folder; give the sweep folder of docs/feedback/{name}.toml")
    out = output_folder(args.out if args.out is not None else Path("docs/feedback"))
    written = write_feedback_report(out, args.feedback, args.robust, args.drift)
    for path in written:
        console().print(escape(str(path)), highlight=False)
    return 0
