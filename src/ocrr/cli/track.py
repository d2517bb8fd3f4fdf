"""``--track`` of ``ocrr run`` and ``ocrr sweep``: the option, and what the command's parent run
holds (its settings as params; the summary, the results and the report as artifacts). Each
run's own params and metrics come from the engine (ocrr.engine.tracking)."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from ocrr.engine.tracking import Tracker, track_option_help


def add_track_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--track", default=None, metavar="mlflow[:URI]", help=track_option_help())


def experiment_params(exp, systems: list[str], out: Path) -> dict[str, object]:
    """``ocrr run``'s settings (those config.json records under "experiment")."""
    return {"command": "ocrr run", **dataclasses.asdict(exp), "systems": systems, "out": str(out)}


def sweep_params(grid, preset: str | None, out: Path) -> dict[str, object]:
    return {"command": "ocrr sweep", "preset": preset, **dataclasses.asdict(grid), "out": str(out)}


# What a tracked command keeps of its results folder as artifacts, beside the report
RUN_ARTIFACTS = ("summary.csv", "summary.md", "config.json", "per_checkpoint.csv")  # ocrr run
SWEEP_ARTIFACTS = ("results.csv", "sweep.json")  # ocrr sweep


def log_run_folder(tracker: Tracker, paths: dict[str, Path], out: Path) -> None:
    """An ``ocrr run`` folder (``paths``: what ``write_outputs`` wrote) and its report."""
    log_results(tracker, [paths[name] for name in RUN_ARTIFACTS], out)


def log_sweep_folder(tracker: Tracker, out: Path, report: Path | None) -> None:
    """A sweep folder's results and its report (``report``: when --report built it)."""
    log_results(tracker, [out / name for name in SWEEP_ARTIFACTS], out, report)


def log_results(tracker: Tracker, files: list[Path], results: Path, report: Path | None = None) -> None:
    """``files`` and the report of the ``results`` folder as the parent run's artifacts: the one
    already built (``report``), else one built in a temporary folder (the results folder is left
    as the command wrote it)."""
    from ocrr.report import build_report

    if report is not None:
        tracker.log_artifacts([*files, report])
        return
    with tempfile.TemporaryDirectory(prefix="ocrr-report-") as scratch:
        built = build_report(results, Path(scratch) / "report")
        tracker.log_artifacts([*files, built.out])
