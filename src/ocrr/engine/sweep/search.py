"""Hyperparameter search as sweeps: candidates per method, staged, each method keeping its best.

A ``Space`` is one method's grid: its own hyperparameters and their candidate values, and
the ones it takes from another method's pick (``inherit``), as the CMR paper tunes the
continual fine-tuning settings first and searches each method's own arguments on top of them
(its Appendix A.2). ``stages`` orders the spaces so every method is searched after the
methods it inherits from. Each stage is an ordinary sweep (resumable, tasks keyed by their
full configuration), so re-running a search skips every finished candidate.

``best`` picks, per method, the candidate with the highest mean score over its validation
runs; ties go to the first candidate in grid order, so a pick never depends on timing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ocrr.errors import OcrrError
from ocrr.specs import format_spec


@dataclass(frozen=True)
class Space:
    """One method's search space: ``grid`` {hyperparameter: candidate values} crossed in
    order; ``inherit`` {hyperparameter: method}: the value that method's pick settled on."""

    method: str  # a registered system name
    grid: dict = field(default_factory=dict)
    inherit: dict = field(default_factory=dict)

    def candidates(self, picks: dict[str, dict]) -> list[dict]:
        """Every candidate's overrides, given the picks of the methods it inherits from."""
        inherited = {}
        for key, source in self.inherit.items():
            if source not in picks:
                raise OcrrError(
                    f"search: {self.method} takes {key} from {source}, which has no pick yet. "
                    "List the spaces so that every source comes first."
                )
            if key in picks[source]:
                inherited[key] = picks[source][key]
        keys = list(self.grid)
        combos = itertools.product(*(self.grid[k] for k in keys)) if keys else [()]
        return [{**inherited, **dict(zip(keys, combo))} for combo in combos]

    def spec(self, overrides: dict) -> str:
        return format_spec(self.method, overrides)


def stages(spaces: list[Space]) -> list[list[Space]]:
    """Spaces grouped into stages: a space runs after every method it inherits from."""
    by_method = {s.method: s for s in spaces}
    unknown = {src for s in spaces for src in s.inherit.values()} - set(by_method)
    if unknown:
        raise OcrrError(f"search: inherits from {', '.join(sorted(unknown))}, which has no space of its own.")
    done: set[str] = set()
    out = []
    left = list(spaces)
    while left:
        ready = [s for s in left if set(s.inherit.values()) <= done]
        if not ready:
            raise OcrrError(
                "search: the spaces inherit from each other in a circle: " + ", ".join(s.method for s in left) + "."
            )
        out.append(ready)
        done |= {s.method for s in ready}
        left = [s for s in left if s not in ready]
    return out


def best(space: Space, picks: dict[str, dict], scores: pd.Series) -> tuple[dict, pd.DataFrame]:
    """(overrides of the best candidate, a table of every candidate's score and run count).

    ``scores``: one value per validation run, indexed by system spec (repeated per run).
    """
    rows = []
    for overrides in space.candidates(picks):
        spec = space.spec(overrides)
        values = scores[scores.index == spec].to_numpy(float)
        values = values[np.isfinite(values)]
        rows.append(
            {
                "method": space.method,
                "system": spec,
                "runs": len(values),
                "score": float(values.mean()) if len(values) else np.nan,
            }
        )
    table = pd.DataFrame(rows)
    if not table["runs"].any():
        raise OcrrError(
            f"search: no finished validation run of {space.method}. Run the search again (finished "
            "runs are kept) and look at the failures it reports."
        )
    top = int(np.nanargmax(table["score"].to_numpy()))  # the first of equal maxima: grid order
    table["picked"] = np.arange(len(table)) == top
    return space.candidates(picks)[top], table


def run_stages(spaces: list[Space], run_stage: Callable[[list[str]], pd.Series]) -> tuple[dict, pd.DataFrame]:
    """Search every space, stage by stage. ``run_stage(specs)`` runs the validation sweep of
    those system specs and returns per-run scores indexed by spec. Returns (picks, table)."""
    picks: dict[str, dict] = {}
    tables = []
    for stage in stages(spaces):
        specs = [space.spec(o) for space in stage for o in space.candidates(picks)]
        scores = run_stage(list(dict.fromkeys(specs)))
        for space in stage:
            picks[space.method], table = best(space, picks, scores)
            tables.append(table)
    return picks, pd.concat(tables, ignore_index=True)
