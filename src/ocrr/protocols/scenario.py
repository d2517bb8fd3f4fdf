"""A Scenario: what one run streams and evaluates, independent of any system."""

from __future__ import annotations

from dataclasses import dataclass, field

from ocrr.batch import Batch


@dataclass(frozen=True)
class Scenario:
    """The seed set a system is fitted on, the stream it is corrected on, and the eval sets.

    ``labels`` is the dataset's full sorted label list (parametric heads pre-allocate it).
    ``eval_sets`` maps a name ("original", "novel") to its items.
    """

    protocol: str
    seed_value: int
    labels: tuple[str, ...]
    seed_set: Batch
    stream: Batch
    eval_sets: dict[str, Batch]
    heldout: tuple[str, ...] = ()
    info: dict = field(default_factory=dict)
