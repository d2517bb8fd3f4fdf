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
* ``summarise`` / ``table`` / ``per_run``: its per-cell summary, its main table and its
  per-run finals. The defaults here work for any protocol: final value of every metric and
  online accuracy; the held-out protocol overrides them with the paper's. How report.html
  draws a protocol's cells is the report's business (ocrr.report.presentation), registered
  there by protocol name; a protocol without one gets its main table and one curve per metric.

Adding a protocol is one module with a ``Protocol`` subclass and one ``register_protocol``
line (ocrr.protocols.registry), as adding a system is.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from ocrr.protocols.summary import CELL_KEYS, RUN_KEYS, final_values, fmt_acc, fmt_buffer, last_checkpoints
from ocrr.specs import Option, format_spec, validate  # (Option: protocols declare theirs with it)


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
        owner, hint = f"protocol {self.name}", f"Run 'ocrr protocols {self.name}' to list its options."
        given = validate(owner, {**COMMON_OPTIONS, **self.options}, values, hint)
        self.values = {k: given[k] if k in given else o.check(owner, k, o.default) for k, o in self.options.items()}
        for k, opt in COMMON_OPTIONS.items():  # left out at their default, so task ids stay as they were
            if k not in self.options and given.get(k, opt.default) != opt.default:
                self.values[k] = given[k]

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
        return format_spec(self.name, self.values)

    def scenario(self, dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed: int):
        raise NotImplementedError

    # -- results (report.html draws them: ocrr.report.presentation) ----------------------------

    def summarise(self, per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
        """One row per (dataset, encoder, policy, system): the final value of every metric
        (mean and population std over seeds), corrections, online accuracy, footprint."""
        return final_values(per_checkpoint, [m for m in self.metrics if m in per_checkpoint.columns], footprints)

    def summary_columns(self) -> list[str]:
        """Leading columns of summary.csv, in order (the rest follow as they come)."""
        return CELL_KEYS + ["n_seeds"] + [f"final_{m}_{s}" for m in self.metrics for s in ("mean", "std")]

    def table(self, summary: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
        """(header, rows, footnote) of its main table: final metrics per system."""
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
        metrics = [m for m in self.metrics if m in per_checkpoint.columns]
        last = last_checkpoints(per_checkpoint)
        cols = RUN_KEYS + ["step", "corrections"] + metrics
        cols += [c for c in ("online_accuracy",) if c in last.columns]
        return last[cols].rename(columns={m: f"final_{m}" for m in metrics}).reset_index(drop=True)


# Re-exported for protocols that declare options.
__all__ = ["COMMON_OPTIONS", "Option", "Protocol", "RunSoFar"]
