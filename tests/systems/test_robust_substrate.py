"""The robust substrate: isolated contradictions are discounted, corroborated ones count, and
it honours the system contract."""

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.checks import check_system
from ocrr.systems import make_system


def unit(*rows):
    x = np.array(rows, np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def seed():
    # class a spread around e0 (cosine 0.89 to it), class b at e1
    return Batch(unit([1, 0.5, 0, 0], [1, 0, 0.5, 0], [1, 0, 0, 0.5], [0, 1, 0, 0]), None, ["a", "a", "a", "b"])


def test_an_isolated_wrong_correction_is_outvoted_where_the_plain_substrate_follows_it(seed):
    query = Batch(unit([1, 0.01, 0.01, 0.01]))
    wrong = Batch(unit([1, 0.01, 0.01, 0.012]), None, ["z"])  # a noisy label in the middle of class a
    # plain: z is the top hit and the a's are outside its margin band; robust: the band is anchored
    # at the best corroborated neighbour (an a), where two a's outvote z's half vote
    plain, robust = make_system("substrate:k=3"), make_system("robust_substrate:k=3")
    for system in (plain, robust):
        system.fit(seed)
        system.correct(wrong)
    assert plain.predict(query) == ["z"]
    assert robust.predict(query) == ["a"]
    assert robust.corroborated().tolist() == [True] * 4 + [False]


def test_a_second_correction_of_the_same_label_corroborates_both(seed):
    robust = make_system("robust_substrate:k=3").fit(seed)
    c1 = Batch(unit([0, 0, 1, 0]), None, ["c"])  # a new class, far from a and b
    robust.correct(c1)
    assert robust.corroborated()[-1] == np.False_
    robust.correct(Batch(unit([0, 0, 1, 0.05]), None, ["c"]))
    assert robust.corroborated()[-2:].tolist() == [True, True]
    assert robust.predict(Batch(unit([0, 0, 1, 0.02]))) == ["c"]


def test_without_corroborated_neighbours_it_votes_as_the_substrate(seed):
    robust = make_system("robust_substrate:k=1").fit(Batch(unit([1, 0, 0, 0]), None, ["a"]))
    robust.correct(Batch(unit([0, 1, 0, 0]), None, ["n"]))
    assert robust.predict(Batch(unit([0, 1, 0.1, 0]))) == ["n"]  # the only neighbour, uncorroborated, still wins


def test_nothing_is_dropped_from_the_ledger(seed):
    robust = make_system("robust_substrate:k=3").fit(seed)
    robust.correct(Batch(unit([1, 0.01, 0.01, 0.012], [0, 0, 1, 0]), None, ["z", "c"]))
    assert robust.footprint().entries == 6 and robust.verify().ok


def test_robust_substrate_passes_the_conformance_suite():
    check_system("robust_substrate")


@pytest.mark.parametrize("bad", ["robust_substrate:isolated_weight=2", "robust_substrate:support_k=0"])
def test_bad_hyperparameters_are_refused(bad):
    from ocrr.errors import OcrrError

    with pytest.raises(OcrrError):
        make_system(bad)
