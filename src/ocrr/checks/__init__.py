"""Conformance checks for systems: does a system honour the System protocol?

In the spirit of scikit-learn's ``check_estimator`` / ``parametrize_with_checks`` and
river's ``check_estimator``: the suite ships with ocrr, so a system written anywhere is
checked in one line. A system is given as a registered spec (``"substrate"``,
``"substrate:k=3"``) or as a class (or function) that builds it from ``labels=``,
``seed=`` and hyperparameter keyword arguments::

    from ocrr.checks import check_system
    check_system("my_system")           # raises CheckFailed naming the first failed check

    from ocrr.checks import parametrize_with_checks   # in a pytest file: one test per check
    @parametrize_with_checks(["my_system", MyOtherSystem])
    def test_my_systems(system, check):
        check(system)

The checks build their own small data and fresh systems. Which checks run depends on the
capabilities a system declares (see ``ocrr.systems.base.System``): ``learns = False``
systems must ignore corrections instead of learning from them, and answer None when fitted
on an empty seed set (they know no label); learning systems fitted on one must start
learning from their first corrections; ``reads_text = True``
systems must refuse batches without texts, the others must work without any. A factory's
``conformance_overrides`` dict holds hyperparameters to check it with, so that a heavy
system is checked in seconds (lora uses a tiny random encoder).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ocrr.checks import suite
from ocrr.checks.data import Checkable, CheckData, Subject, SystemUnavailable, check_data

__all__ = ["Check", "CheckFailed", "SystemUnavailable", "check_system", "yield_checks", "parametrize_with_checks"]

# Checks every system must pass, in the order check_system runs them (the basics first).
COMMON = (
    suite.check_fit_returns_self_and_predicts_one_label_per_item,
    suite.check_unfitted_system_refuses,
    suite.check_predict_has_no_side_effects,
    suite.check_empty_batches,
    suite.check_hyperparameters_are_constructor_arguments,
    suite.check_correct_leaves_its_input_and_refusals_untouched,
    suite.check_batched_predict_equals_one_by_one,
    suite.check_same_seed_same_predictions,
    suite.check_footprint_is_reported,
    suite.check_bad_queries_raise_ocrr_errors,
    suite.check_pickle_round_trip,
    suite.check_fit_on_an_empty_seed_set,
)


class CheckFailed(AssertionError):
    """A system failed a check. ``check`` names it, ``system`` names the system."""

    def __init__(self, check: str, system: str, detail: str):
        super().__init__(f"{system} failed {check}: {detail}")
        self.check = check
        self.system = system


@dataclass(frozen=True)
class Check:
    """One named check. Call it with a system spec or factory (or a Subject)."""

    name: str
    run: Callable[[Subject, CheckData], None]

    def __call__(self, system: Checkable | Subject) -> None:
        subject = system if isinstance(system, Subject) else Subject(system)
        with _one_torch_thread():
            try:
                self.run(subject, check_data())
            except SystemUnavailable:
                raise
            except AssertionError as err:
                raise CheckFailed(self.name, subject.name, str(err)) from err
            except Exception as err:  # a crash is a failure of this check too, and says which
                raise CheckFailed(self.name, subject.name, f"raised {type(err).__name__}: {err}") from err

    def __repr__(self) -> str:
        return self.name


def yield_checks(system: Checkable | Subject) -> Iterator[Check]:
    """The checks that apply to ``system`` (a spec or factory), chosen by its capabilities."""
    subject = system if isinstance(system, Subject) else Subject(system)
    chosen = list(COMMON)
    chosen.append(
        suite.check_learns_a_label_first_seen_in_a_correction
        if subject.capability("learns", True)
        else suite.check_ignores_corrections
    )
    chosen.append(
        suite.check_learns_after_an_empty_seed_set
        if subject.capability("learns", True)
        else suite.check_answers_none_after_an_empty_seed_set
    )
    chosen.append(
        suite.check_refuses_batches_without_text
        if subject.capability("reads_text", False)
        else suite.check_works_without_texts
    )
    if subject.anticipates():
        chosen.append(suite.check_anticipate_changes_no_prediction)
    for fn in chosen:
        yield Check(fn.__name__, fn)


def check_system(system: Checkable) -> list[str]:
    """Run every applicable check on ``system`` (a registered spec or a factory).

    Raises CheckFailed (an AssertionError) naming the first check that fails, or
    SystemUnavailable (an OcrrError) if the system needs an extra that is not installed.
    Returns the names of the checks that passed.

    Examples:
        >>> from ocrr.checks import check_system
        >>> passed = check_system("substrate:k=3")
        >>> passed[:2]
        ['check_fit_returns_self_and_predicts_one_label_per_item', 'check_unfitted_system_refuses']

        A system that breaks the protocol is told the first check it fails:

        >>> from ocrr.systems.substrate import Substrate
        >>> class Careless(Substrate):
        ...     def correct(self, batch):
        ...         return self  # neither checks that it was fitted nor learns
        >>> check_system(Careless)
        Traceback (most recent call last):
        ...
        ocrr.checks.CheckFailed: Careless failed check_unfitted_system_refuses: correct() before fit() raised nothing...
    """
    subject = Subject(system)
    passed = []
    for check in yield_checks(subject):
        check(subject)
        passed.append(check.name)
    return passed


def parametrize_with_checks(systems: Sequence[Checkable]) -> Any:
    """A ``pytest.mark.parametrize`` over (system, check) pairs, one test per check.

    The decorated test takes ``system`` and ``check`` and calls ``check(system)``. A
    system that needs an optional extra that is not installed is skipped, saying which.
    """
    import pytest  # only here: pytest is a test dependency, not one of ocrr's

    params, ids = [], []
    for system in systems:
        subject = Subject(system)
        for check in yield_checks(subject):
            params.append((system, _skipping_unavailable(check, pytest.skip)))
            ids.append(f"{subject.name}-{check.name}")
    return pytest.mark.parametrize("system, check", params, ids=ids)


def _skipping_unavailable(check: Check, skip: Callable[[str], None]) -> Check:
    def run(subject: Subject, data: CheckData) -> None:
        try:
            check.run(subject, data)
        except SystemUnavailable as err:
            skip(str(err))

    return Check(check.name, run)


@contextmanager
def _one_torch_thread() -> Iterator[None]:
    """One torch thread while checking, as the runner pins it: on a shared small machine the
    default pool made the checks' tiny models many times slower (docs/reference/measurements.md)."""
    torch = sys.modules.get("torch")  # never imported here: only systems that use torch load it
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
