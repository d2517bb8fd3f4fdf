"""ocrr.checks on systems defined here, as a user outside ocrr would write them.

A small, correct system passes in one line; broken variants fail, and the failure names
the check that caught them.
"""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.checks import CheckFailed, check_system, parametrize_with_checks, yield_checks
from ocrr.errors import NotFittedError, OcrrError
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.registry import REGISTRY, make_system, register


class NearestNeighbour(System):
    """1-nearest neighbour over everything it was fitted on or corrected with."""

    def __init__(
        self,
        min_similarity: float = -1.0,
        device: str = "cpu",
        labels=None,
        seed: int = 0,
        name: str = "nearest_neighbour",
    ):
        self.min_similarity = min_similarity
        self.device = device  # an execution setting: not a hyperparameter
        self.labels = labels
        self.seed = seed
        self.name = name

    execution_settings = ("device",)

    def fit(self, seed: Batch) -> NearestNeighbour:
        self.vecs_ = check_vectors(seed.vecs, None, "seed vectors").copy()
        self.entry_labels_ = list(require_labels(seed, self.name))
        return self

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        queries = check_vectors(batch.vecs, self.vecs_.shape[1], "query vectors")
        if len(queries) == 0:
            return []
        if len(self.vecs_) == 0:  # fitted on nothing and not corrected yet: no label to give
            return [None] * len(queries)
        sims = queries @ self.vecs_.T
        best = sims.argmax(axis=1)  # ties: the earliest entry
        return [self.entry_labels_[j] if sims[i, j] >= self.min_similarity else None for i, j in enumerate(best)]

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.vecs_.shape[1], "vectors")
        self.vecs_ = np.vstack([self.vecs_, vecs])
        self.entry_labels_ += list(labels)

    def footprint(self) -> Footprint:
        self._require_fitted()
        return Footprint(entries=len(self.vecs_), bytes=int(self.vecs_.nbytes))


class MemorisesPredictions(NearestNeighbour):
    """Broken: predict() keeps every vector it predicted, with the label it gave."""

    def predict(self, batch: Batch) -> list[str | None]:
        preds = super().predict(batch)
        if len(batch):
            self.vecs_ = np.vstack([self.vecs_, batch.vecs])
            self.entry_labels_ += preds
        return preds


class LearnsFromTheHint(NearestNeighbour):
    """Broken: anticipate() stores the stream it is shown, labelled with today's guesses."""

    def anticipate(self, batch: Batch) -> None:
        self.correct(Batch(batch.vecs, None, self.predict(batch)))


class ClaimsNotToLearn(NearestNeighbour):
    """Broken: declares learns = False, but corrections change its predictions."""

    learns = False


class CrashesOnAnEmptySeedSet(NearestNeighbour):
    """Broken: fitted on no item, predict() takes the argmax of an empty row."""

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        sims = check_vectors(batch.vecs, self.vecs_.shape[1], "query vectors") @ self.vecs_.T
        return [self.entry_labels_[j] for j in sims.argmax(axis=1)] if len(batch) else []


class StaticNearestNeighbour(NearestNeighbour):
    """1-nearest neighbour over the seed set only: corrections are checked, then ignored."""

    learns = False

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        require_labels(batch, self.name)
        check_vectors(batch.vecs, self.vecs_.shape[1], "vectors")


class GuessesWhenFittedOnNothing(StaticNearestNeighbour):
    """Broken: never learns, yet fitted on nothing it answers the first label it was told."""

    def predict(self, batch: Batch) -> list[str | None]:
        self._require_fitted()
        if len(self.vecs_) == 0:
            return [self.labels[0]] * len(batch)
        return super().predict(batch)


class StuckAfterAnEmptySeedSet(NearestNeighbour):
    """Broken: fitted on nothing, it never starts learning (corrections are dropped)."""

    def fit(self, seed: Batch) -> StuckAfterAnEmptySeedSet:
        super().fit(seed)
        self.stuck_ = len(seed) == 0
        return self

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        if not self.stuck_:
            super().correct(batch)


class ClaimsToReadText(NearestNeighbour):
    """Broken: declares reads_text = True, but predicts from vectors alone without complaint."""

    reads_text = True


@pytest.fixture
def registered():
    """Register the systems of this file as a plugin would; remove them afterwards."""
    names = {
        "nearest_neighbour": NearestNeighbour,
        "memorises_predictions": MemorisesPredictions,
        "claims_not_to_learn": ClaimsNotToLearn,
    }
    for name, cls in names.items():
        register(name, cls, "test", cls.__doc__.splitlines()[0], in_all=False)
    yield names
    for name in names:
        REGISTRY.pop(name, None)


def test_a_system_registered_outside_ocrr_passes_in_one_line(registered):
    passed = check_system("nearest_neighbour")
    assert passed == [check.name for check in yield_checks("nearest_neighbour")]
    assert "check_predict_has_no_side_effects" in passed and "check_learns_a_label_first_seen_in_a_correction" in passed
    assert check_system("nearest_neighbour:min_similarity=-0.5")  # a spec with overrides works too


def test_predict_with_a_side_effect_fails_the_side_effect_check(registered):
    with pytest.raises(CheckFailed) as info:
        check_system("memorises_predictions")
    assert info.value.check == "check_predict_has_no_side_effects"
    assert info.value.system == "memorises_predictions"
    assert "predict() changed its state" in str(info.value)


def test_declaring_learns_false_but_learning_fails_the_capability_check(registered):
    names = [check.name for check in yield_checks("claims_not_to_learn")]
    assert "check_ignores_corrections" in names and "check_learns_a_label_first_seen_in_a_correction" not in names
    with pytest.raises(CheckFailed) as info:
        check_system("claims_not_to_learn")
    assert info.value.check == "check_ignores_corrections"


def test_registry_is_clean_after_the_fixture():
    assert not {"nearest_neighbour", "memorises_predictions", "claims_not_to_learn"} & set(REGISTRY)


def test_a_crash_inside_a_check_is_reported_as_that_check():
    class CrashesOnEmpty(NearestNeighbour):
        def predict(self, batch):
            if len(batch) == 0:
                raise IndexError("empty")
            return super().predict(batch)

    with pytest.raises(CheckFailed, match=r"check_empty_batches: raised IndexError: empty"):
        check_system(CrashesOnEmpty)


def test_an_instance_is_refused_with_the_fix():
    with pytest.raises(OcrrError, match="the class, not an instance"):
        check_system(NearestNeighbour())


def test_an_unknown_name_is_refused_with_the_fix():
    with pytest.raises(OcrrError, match="Run 'ocrr systems'"):
        check_system("substrat")


def test_a_crash_after_an_empty_seed_set_fails_the_empty_seed_check():
    with pytest.raises(CheckFailed) as info:
        check_system(CrashesOnAnEmptySeedSet)
    assert info.value.check == "check_fit_on_an_empty_seed_set"
    assert "argmax of an empty sequence" in str(info.value)


def test_learning_capability_chooses_the_empty_seed_checks():
    learner = [check.name for check in yield_checks(NearestNeighbour)]
    static = [check.name for check in yield_checks(StaticNearestNeighbour)]
    assert (
        "check_learns_after_an_empty_seed_set" in learner
        and "check_answers_none_after_an_empty_seed_set" not in learner
    )
    assert (
        "check_answers_none_after_an_empty_seed_set" in static and "check_learns_after_an_empty_seed_set" not in static
    )
    assert check_system(StaticNearestNeighbour) == static  # a correct static system passes them all


def test_a_static_system_guessing_from_nothing_fails():
    with pytest.raises(CheckFailed) as info:
        check_system(GuessesWhenFittedOnNothing)
    assert info.value.check == "check_answers_none_after_an_empty_seed_set"
    assert "it knows no label: it must answer None" in str(info.value)


def test_a_learner_that_never_starts_after_an_empty_seed_set_fails():
    with pytest.raises(CheckFailed) as info:
        check_system(StuckAfterAnEmptySeedSet)
    assert info.value.check == "check_learns_after_an_empty_seed_set"
    assert "answers None for each of them" in str(info.value)


def test_a_hint_that_changes_predictions_fails_the_anticipate_check():
    assert "check_anticipate_changes_no_prediction" not in [c.name for c in yield_checks(NearestNeighbour)]
    with pytest.raises(CheckFailed) as info:
        check_system(LearnsFromTheHint)
    assert info.value.check == "check_anticipate_changes_no_prediction"
    assert "differs from a system that had no hint" in str(info.value)


def test_text_capability_chooses_the_text_checks():
    assert "check_refuses_batches_without_text" in [c.name for c in yield_checks(ClaimsToReadText)]
    with pytest.raises(CheckFailed) as info:
        check_system(ClaimsToReadText)
    assert info.value.check == "check_refuses_batches_without_text"
    assert "check_works_without_texts" in [c.name for c in yield_checks(NearestNeighbour)]


# The pytest helper, on a class that is not registered at all: one test per check.
@parametrize_with_checks([NearestNeighbour])
def test_parametrize_with_checks(system, check):
    check(system)


def test_base_class_defaults():
    system = NearestNeighbour(min_similarity=0.2, device="cuda", name="nn")
    # constructor arguments, without the run's identity (name, labels, seed) or execution settings
    assert system.hyperparameters() == {"min_similarity": 0.2}
    assert (NearestNeighbour.learns, NearestNeighbour.reads_text) == (True, False)
    with pytest.raises(NotFittedError, match=r"nn is not fitted yet: call fit\(seed_batch\) first"):
        system.predict(Batch(np.ones((1, 4), np.float32)))
    assert isinstance(NotFittedError("x"), OcrrError)


def test_default_hyperparameters_follow_kwargs_to_the_parent():
    class Child(NearestNeighbour):
        def __init__(self, extra: int = 3, **kwargs):
            super().__init__(**kwargs)
            self.extra = extra

    assert Child(min_similarity=0.5).hyperparameters() == {"extra": 3, "min_similarity": 0.5}

    class Forgets(NearestNeighbour):
        def __init__(self, lost: int = 1, **kwargs):
            super().__init__(**kwargs)

    with pytest.raises(OcrrError, match="lost .*store them in __init__ or override hyperparameters"):
        Forgets().hyperparameters()


def test_built_in_systems_raise_not_fitted_error():
    for spec in ("substrate", "static_knn", "online_linear", "knn_lm", "river_logreg"):
        with pytest.raises(NotFittedError, match="call fit"):
            make_system(spec).predict(Batch(np.ones((1, 4), np.float32)))


def test_pytest_stays_a_test_dependency():
    """Importing ocrr.checks (and running a check) must not need pytest."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['pytest'] = None\n"  # any import of pytest now fails
        "from ocrr.checks import check_system\n"
        "print(len(check_system('static_knn')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 13
