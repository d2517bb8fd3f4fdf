"""Experiment tracking: every run of ``ocrr run`` or ``ocrr sweep`` handed to a tracker (MLflow).

The engine knows only the ``Tracker`` interface below, never a tracking tool. The command
opens a tracker at the door (``open_tracker("mlflow[:URI]")``: a missing package or a store
out of reach fails before any work), starts the parent run (the whole command), and the
engine tells it each ocrr run (one system, one seed) as its results are collected:
``run_started``, one ``checkpoint`` per checkpoint (its step: the number of corrections so
far), ``run_ended``. Runs that ran on worker processes are told where their output arrives,
so a tracker is only ever used from one process. A tracker writes only to its own store:
the results files are the same with or without one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from ocrr.errors import OcrrError

TRACKERS = ("mlflow",)  # what --track takes, each with an optional :URI

_CORRECTIONS = "corrections"  # the metric that becomes each checkpoint's step


class Tracker(Protocol):
    """Where runs are logged. The command calls ``start`` (its own parent run),
    ``log_artifacts`` and ``end``; the engine calls the three ``run_*``/``checkpoint``
    methods for every ocrr run, ``run`` being its task id."""

    def start(self, name: str, params: Mapping[str, object]) -> None: ...

    def run_started(self, run: str, name: str, params: Mapping[str, object]) -> None: ...

    def checkpoint(self, run: str, step: int, metrics: Mapping[str, float]) -> None: ...

    def run_ended(self, run: str, error: str | None = None) -> None: ...

    def log_artifacts(self, paths: list[Path]) -> None: ...

    def end(self, status: str) -> None: ...


def track_option_help() -> str:
    return (
        "log every run to MLflow: mlflow (a local store in ./mlruns, or $MLFLOW_TRACKING_URI when set) | "
        "mlflow:FOLDER (a local store there) | mlflow:URI (sqlite:///x.db, http://host:5000, ...); "
        "pip install -e '.[tracking]'"
    )


def open_tracker(option: str | None) -> Tracker | None:
    """The tracker ``--track`` names (None without one), its store opened now, so that a
    missing package or a store out of reach stops the command before any work."""
    if option is None:
        return None
    kind, colon, location = option.partition(":")
    if kind not in TRACKERS:
        raise OcrrError(f"--track {option}: unknown tracker {kind!r}. Use --track mlflow or --track mlflow:URI.")
    if colon and not location.strip():  # (else MLflow's default store, ./mlruns, would take it silently)
        raise OcrrError(
            f"--track {option!r} names no store after the colon: give one (--track mlflow:URI), or write "
            "--track mlflow for MLflow's default"
        )
    from ocrr.engine.tracking.mlflow_tracker import MlflowTracker

    return MlflowTracker(location or None)


@contextlib.contextmanager
def parent_run(tracker: Tracker | None, name: str, params: Mapping[str, object]) -> Iterator[Tracker | None]:
    """The command's parent run, ended FINISHED, or FAILED (KILLED on Ctrl-C) when the body raises."""
    if tracker is None:
        yield None
        return
    tracker.start(name, params)
    status = "FAILED"
    try:
        yield tracker
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.end(status)


def report_run(
    tracker: Tracker,
    run: str,
    name: str,
    params: Mapping[str, object],
    metrics: list[dict],
    footprint: Mapping[str, int],
) -> None:
    """Tell ``tracker`` one finished run from its long metric rows ({step, episode, metric,
    value}, as a task's output holds them): one checkpoint per (step, episode), its step the
    corrections so far; ``items_seen`` and ``episode`` beside the protocol's metrics."""
    tracker.run_started(run, name, params)
    for at, values in _checkpoints(metrics):
        tracker.checkpoint(run, int(values.pop(_CORRECTIONS, 0.0)), {**values, "items_seen": at[0], "episode": at[1]})
    if metrics and footprint:  # run-level figures (the end of the stream): at the last checkpoint
        last = max(metrics, key=lambda row: (row["step"], row["episode"]))
        corrections = [r["value"] for r in metrics if r["metric"] == _CORRECTIONS and r["step"] == last["step"]]
        tracker.checkpoint(run, int(max(corrections, default=0.0)), {k: float(v) for k, v in footprint.items()})
    tracker.run_ended(run)


def _checkpoints(metrics: list[dict]) -> list[tuple[tuple[int, int], dict[str, float]]]:
    """(step, episode) -> {metric: value}, in stream order."""
    by_point: dict[tuple[int, int], dict[str, float]] = {}
    for row in metrics:
        by_point.setdefault((int(row["step"]), int(row["episode"])), {})[row["metric"]] = float(row["value"])
    return sorted(by_point.items())


__all__ = ["TRACKERS", "Tracker", "open_tracker", "parent_run", "report_run", "track_option_help"]
