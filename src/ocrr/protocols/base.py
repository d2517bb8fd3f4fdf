"""What a protocol is: canonical options, a scenario per (dataset, seed), and its results' shape.

A protocol owns everything between the data and the tidy results that is particular to it:

* ``options``: declared with defaults and checks, validated when the protocol is built
  (so ``--protocol heldout:every=0`` fails at the door), and hashed into task ids;
* ``scenario(dataset, train_vecs, test_vecs, seed)``: the upstream (seed) set, the stream
  cut into episodes, and the evaluation plan (when, and on which sets);
* common options every protocol accepts (``COMMON_OPTIONS``): ``shift=S`` asks the runner
  for near-future accuracy at S items ahead (``build_scenario`` puts it on the scenario).
  At its default (none) it is left out of the options, so task ids stay as they were;
* ``metrics``: the names its evaluations produce (``acc_<eval set>``), in table order;
* ``summarise`` / ``table`` / ``report_cell``: its per-cell summary and its report tables and
  figures. The defaults here work for any protocol: final value of every metric, online
  accuracy, and one curve per metric; the held-out protocol overrides them with the paper's.

Adding a protocol is one module with a ``Protocol`` subclass and one ``register_protocol``
line (ocrr.protocols.registry), as adding a system is.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ocrr.errors import OcrrError


@dataclass(frozen=True)
class Option:
    """One protocol option: its default, its type, and the range it must lie in."""

    default: Any
    kind: type = int
    low: float | None = None  # inclusive
    high: float | None = None  # inclusive
    allow_none: bool = False
    help: str = ""

    def check(self, protocol: str, name: str, value: Any) -> Any:
        if value is None and self.allow_none:
            return None
        ok = not isinstance(value, bool) or self.kind is bool
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = ok and isinstance(value, self.kind)
        ok = ok and (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        if not ok:
            bounds = []
            if self.low is not None:
                bounds.append(f">= {self.low:g}")
            if self.high is not None:
                bounds.append(f"<= {self.high:g}")
            what = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}[self.kind]
            need = what + (f" {' and '.join(bounds)}" if bounds else "") + (" (or none)" if self.allow_none else "")
            raise OcrrError(
                f"protocol {protocol}: option {name}={value!r} must be {need}"
                f"{f' ({self.help})' if self.help else ''}. Write e.g. {protocol}:{name}={self.default}."
            )
        return value


@dataclass(frozen=True)
class RunSoFar:
    """What an evaluation may depend on: the stream so far and what the system did with it.

    ``predicted[i]`` is the prediction for stream item i (made before learning it) and
    ``corrected[i]`` whether it was corrected; both are filled up to ``step`` items.
    """

    step: int  # stream items seen
    episode: int  # episodes finished
    predicted: list
    corrected: np.ndarray
    episode_bounds: np.ndarray  # item offsets: episode e is items [bounds[e], bounds[e + 1])

    def last_episode(self) -> range:
        if self.episode == 0:
            return range(0)
        return range(int(self.episode_bounds[self.episode - 1]), int(self.episode_bounds[self.episode]))


# Options of every protocol. Left out of ``values`` (and so of task ids) at their default.
COMMON_OPTIONS: dict[str, Option] = {
    "shift": Option(
        None,
        int,
        low=0,
        allow_none=True,
        help="near-future accuracy: predict S items ahead, S from `ocrr calibrate-shift`; none: off",
    ),
}


class Protocol:
    """Base class: subclass it, declare ``name``, ``options``, ``metrics`` and ``scenario``."""

    name: ClassVar[str] = ""
    summary_text: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}
    metrics: ClassVar[tuple[str, ...]] = ()  # metric columns of its results, in table order

    def __init__(self, **values):
        every = {**COMMON_OPTIONS, **self.options}
        unknown = sorted(set(values) - set(every))
        if unknown:
            known = ", ".join(f"{k} (default {o.default})" for k, o in every.items())
            raise OcrrError(f"protocol {self.name} has no option {', '.join(unknown)}. Its options: {known}.")
        self.values = {k: opt.check(self.name, k, values.get(k, opt.default)) for k, opt in self.options.items()}
        for k, opt in COMMON_OPTIONS.items():
            if k not in self.options and values.get(k, opt.default) != opt.default:
                self.values[k] = opt.check(self.name, k, values[k])

    @property
    def shift(self) -> int | None:
        """The near-future shift S in items (None: near-future accuracy is not measured)."""
        return self.values.get("shift")

    def build_scenario(self, dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed: int):
        """``scenario(...)`` with the common options applied (what the sweep runs)."""
        scenario = self.scenario(dataset, train_vecs, test_vecs, seed)
        return scenario if self.shift is None else dataclasses.replace(scenario, shift=self.shift)

    def canonical(self) -> dict:
        """The options that define its results, with the name: hashed into task ids."""
        return {"name": self.name, **{k: self.values[k] for k in sorted(self.values)}}

    def spec(self) -> str:
        from ocrr.specs import format_spec

        return format_spec(self.name, self.values)

    def scenario(self, dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed: int):
        raise NotImplementedError

    # -- results -----------------------------------------------------------------------------

    def summarise(self, per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per (dataset, encoder, policy, system): the final value of every metric
        (mean and population std over seeds), corrections, online accuracy, footprint."""
        from ocrr.engine.metrics import CELL_KEYS, RUN_KEYS, add_footprints, add_online_accuracy

        rows = []
        metrics = [m for m in self.metrics if m in per_checkpoint.columns]
        for key, cell in per_checkpoint.groupby(CELL_KEYS, sort=False):
            finals = cell.sort_values("step").groupby(RUN_KEYS[-1:], sort=True).tail(1)
            row = dict(zip(CELL_KEYS, key))
            row["n_seeds"] = len(finals)
            for m in metrics:
                row[f"final_{m}_mean"] = float(finals[m].mean())
                row[f"final_{m}_std"] = float(finals[m].std(ddof=0))
            row["corrections_mean"] = float(finals["corrections"].mean())
            rows.append(row)
        summary = add_footprints(pd.DataFrame(rows), footprints)
        return add_online_accuracy(summary, per_checkpoint)

    def summary_columns(self) -> list[str]:
        """Leading columns of summary.csv, in order (the rest follow as they come)."""
        from ocrr.engine.metrics import CELL_KEYS

        return CELL_KEYS + ["n_seeds"] + [f"final_{m}_{s}" for m in self.metrics for s in ("mean", "std")]

    def table(self, summary: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
        """(header, rows, footnote) of its main table: final metrics per system."""
        from ocrr.engine.results import fmt_acc, fmt_buffer

        header = ["system", "buffer"] + [f"final {m}" for m in self.metrics] + ["online acc", "corrections"]
        rows = []
        for _, r in summary.iterrows():
            n = int(r["n_seeds"])
            rows.append(
                [r["system"], fmt_buffer(r)]
                + [fmt_acc(r[f"final_{m}_mean"], r[f"final_{m}_std"], n) for m in self.metrics]
                + [
                    fmt_acc(r.get("online_accuracy_mean", math.nan), r.get("online_accuracy_std", 0.0), n),
                    f"{r['corrections_mean']:.0f}",
                ]
            )
        note = (
            "Final values at the end of the stream: mean ± std (population) over seeds. Online acc: accuracy "
            "of the stream predictions, each made before the system learned that item."
        )
        return header, rows, note

    def per_run(self, per_checkpoint: pd.DataFrame) -> pd.DataFrame:
        """One row per run: the final value of every metric and the corrections (report's runs.csv)."""
        from ocrr.engine.metrics import RUN_KEYS

        metrics = [m for m in self.metrics if m in per_checkpoint.columns]
        last = per_checkpoint.sort_values("step", kind="mergesort").groupby(RUN_KEYS, sort=True).tail(1)
        cols = RUN_KEYS + ["step", "corrections"] + metrics
        cols += [c for c in ("online_accuracy",) if c in last.columns]
        return last[cols].rename(columns={m: f"final_{m}" for m in metrics}).reset_index(drop=True)

    def report_cell(self, rows: pd.DataFrame, summary: pd.DataFrame, title: str, styles: dict):
        """Tables [(title, header, rows, note)], figures [(kind, Figure, caption)] and extra CSV
        tables {name: frame} of one report cell (dataset, encoder, policy). Default: the main
        table and every metric's curves."""
        from ocrr.report.figures import metric_curves_figure

        header, body, note = self.table(summary)
        metrics = [m for m in self.metrics if m in rows.columns] + (
            ["online_accuracy"] if "online_accuracy" in rows.columns else []
        )
        figure = metric_curves_figure(rows, list(summary["system"]), metrics, styles, title)
        return (
            [(title, header, body, note)],
            [("curves", figure, f"{', '.join(metrics)} against stream items seen, {title}: mean over seeds.")],
            {},
        )


# Re-exported for protocols that declare options.
__all__ = ["COMMON_OPTIONS", "Option", "Protocol", "RunSoFar"]
