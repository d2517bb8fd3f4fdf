"""Choosing the near-future shift S with the blind classifier (EvalOCL, Sec. 3.5).

On a validation stream, A(k, S) is the blind classifier's near-future accuracy at shift S
with a window of k labels: the state after each batch (items < a learned, a > 0) predicts
the mode of the labels [a - k, a) for the items [a + S, a + B + S). A*(S) = max over k of
A(k, S) (k and S on grids of powers of two); S* = the smallest S of the grid with
A*(S) <= max(majority-class accuracy, 1/C) + tolerance. The curve need not fall
monotonically, so the whole of it is reported.

It reads labels only: no encoder, no system. ``blind_accuracy`` is the same computation the
runner does with the ``blind`` system and a ``shift`` (checked against it in the tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ocrr.errors import OcrrError
from ocrr.report.figures import save
from ocrr.report.ocl import blind_curve_figure
from ocrr.systems.blind import blind_modes

TOLERANCE = 0.01


def powers_of_two(upto: int, zero: bool = False) -> list[int]:
    """[0,] 1, 2, 4, ... <= upto."""
    out = [0] if zero else []
    p = 1
    while p <= upto:
        out.append(p)
        p *= 2
    return out


def _starts(n: int, batch: int) -> np.ndarray:
    """For each item, the start (items learned) of the state that predicts it."""
    return (np.arange(n) // batch) * batch


def blind_accuracies(codes: np.ndarray, batch: int, k: int, shifts: Sequence[int]) -> list[tuple[float, int]]:
    """(A(k, S), number of queries) for each S."""
    n = len(codes)
    starts = _starts(n, batch)
    state_starts = np.arange(0, n, batch)
    modes = blind_modes(codes, k, state_starts)[starts // batch]  # the prediction made for item i's state
    out = []
    for s in shifts:
        source = np.arange(max(0, n - s))  # item i's state predicts item i + s
        asked = source[starts[source] > 0]
        out.append((float(np.mean(codes[asked + s] == modes[asked])) if len(asked) else float("nan"), len(asked)))
    return out


def blind_accuracy(labels: Sequence[str], batch: int, k: int, shift: int) -> float:
    """A(k, S) for one label sequence."""
    _, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    return blind_accuracies(codes.astype(np.int64), batch, k, [shift])[0][0]


def chance_level(labels: Sequence[str]) -> float:
    """max(majority-class accuracy, 1/C) over the stream's labels."""
    _, counts = np.unique(np.asarray(labels, dtype=object), return_counts=True)
    return float(max(counts.max() / counts.sum(), 1.0 / len(counts)))


@dataclass
class Calibration:
    curve: pd.DataFrame  # k, shift, accuracy (mean over the validation streams), queries
    best: pd.DataFrame  # shift, a_star, best_k
    chance: float
    shift: int | None  # S*, None when no S of the grid comes down to chance
    tolerance: float = TOLERANCE


def calibrate(
    streams: Sequence[Sequence[str]], batch: int, ks: Sequence[int], shifts: Sequence[int], tolerance: float = TOLERANCE
) -> Calibration:
    """A(k, S) averaged over the validation streams, A*(S), the chance level and S*."""
    if not streams or not all(len(s) for s in streams):
        raise OcrrError("calibrate-shift needs at least one non-empty validation stream.")
    rows = []
    for labels in streams:
        _, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
        for k in ks:
            for s, (acc, n) in zip(shifts, blind_accuracies(codes.astype(np.int64), batch, k, shifts)):
                rows.append({"k": int(k), "shift": int(s), "accuracy": acc, "queries": n})
    curve = (
        pd.DataFrame(rows)
        .groupby(["k", "shift"], sort=True, as_index=False)
        .agg(accuracy=("accuracy", "mean"), queries=("queries", "sum"))
    )
    curve = curve[curve["queries"] > 0]
    # A*(S) and the k that gives it (the smallest k among ties)
    top = curve.sort_values(["shift", "accuracy", "k"], ascending=[True, False, True], kind="mergesort")
    best = top.groupby("shift", sort=True).head(1).rename(columns={"accuracy": "a_star", "k": "best_k"})
    best = best[["shift", "a_star", "best_k"]].reset_index(drop=True)
    chance = float(np.mean([chance_level(s) for s in streams]))
    low = best[best["a_star"] <= chance + tolerance]
    shift = int(low["shift"].iloc[0]) if len(low) else None
    return Calibration(curve.reset_index(drop=True), best, chance, shift, tolerance)


def calibrate_protocol(
    dataset, protocol, seeds: Sequence[int], k_max: int = 256, s_max: int | None = None
) -> Calibration:
    """Calibrate on the ocl protocol's streams of ``dataset`` for the given seeds (their
    labels only); the protocol spec says batch, stay and split (use split=val)."""
    if not hasattr(protocol, "streams"):
        raise OcrrError(
            f"calibrate-shift reads the streams of the ocl protocol; {protocol.name} has none. "
            "Use --protocol ocl:stay=...:split=val."
        )
    labels = list(dataset.train.labels)
    streams = [[labels[i] for i in protocol.streams(dataset, seed)[1]] for seed in seeds]
    n = min(len(s) for s in streams)
    s_max = s_max if s_max is not None else n // 2
    return calibrate(streams, protocol.values["batch"], powers_of_two(k_max), powers_of_two(s_max, zero=True))


def write_calibration(cal: Calibration, out: Path, title: str) -> list[Path]:
    """blind_curve.csv (every k and S), blind_shift.csv (A*(S), best k) and the figure."""
    out.mkdir(parents=True, exist_ok=True)
    cal.curve.to_csv(out / "blind_curve.csv", index=False, lineterminator="\n", float_format="%.6f")
    cal.best.assign(chance=cal.chance, chosen=cal.best["shift"] == cal.shift).to_csv(
        out / "blind_shift.csv", index=False, lineterminator="\n", float_format="%.6f"
    )
    paths = [out / "blind_curve.csv", out / "blind_shift.csv"]
    return paths + save(blind_curve_figure(cal.curve, cal.chance, cal.shift, title), out / "blind_shift")
