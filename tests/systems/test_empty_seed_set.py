"""A system fitted on an empty seed set (the ocl protocol's default ``upstream=0``) answers
without crashing: no label until it has learned one."""

import warnings

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.systems import make_system


def split_batch(split, idx):
    return Batch(split.vecs[idx], [split.texts[i] for i in idx], [split.labels[i] for i in idx])


def empty_seed(ds):
    return split_batch(ds.train, np.arange(0))


def test_static_linear_fitted_on_nothing_gives_no_label(toy):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no torch warning about a zero-row head either
        lin = make_system("static_linear", labels=toy.labels).fit(empty_seed(toy))
    test = split_batch(toy.test, np.arange(len(toy.test)))
    assert lin.predict(test) == [None] * len(test)
    assert np.array_equal(lin.uncertainty(test), np.ones(len(test)))
    lin.correct(split_batch(toy.train, np.arange(5)))  # static: corrections are ignored
    assert lin.predict(test) == [None] * len(test)
    assert lin.predict(test[np.arange(0)]) == []


@pytest.mark.parametrize("spec", ["substrate", "static_knn", "static_linear", "online_linear"])
def test_core_systems_fitted_on_nothing_predict_and_learn(spec, toy):
    system = make_system(spec, labels=toy.labels).fit(empty_seed(toy))
    test = split_batch(toy.test, np.arange(len(toy.test)))
    predictions = system.predict(test)
    assert len(predictions) == len(test)
    assert set(predictions) - {None} <= set(toy.labels)
    system.correct(split_batch(toy.train, np.arange(len(toy.train))))
    after = system.predict(test)
    if system.learns:
        assert np.mean([p == t for p, t in zip(after, test.labels)]) > 0.5
    else:
        assert after == predictions


def test_empty_seed_sets_of_other_dimensions_do_not_share_a_head(tmp_path, monkeypatch):
    """The cached seed head is keyed by the seed vectors' bytes, which are the same (none)
    for an empty seed set of any dimension: a head fitted on nothing must not come from it."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path))  # a cache of this test's own
    for dim in (16, 8):
        ds = clustered_dataset(dim=dim)
        for spec in ("static_linear", "online_linear"):
            system = make_system(spec, labels=ds.labels).fit(empty_seed(ds))
            assert len(system.predict(split_batch(ds.test, np.arange(3)))) == 3


def test_online_linear_fitted_on_nothing_starts_from_the_seeded_initial_head(toy, tmp_path, monkeypatch):
    """The same head as seed training over no item gives: the seeded initialisation."""
    import torch

    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path))
    from ocrr.systems.heads.training import SeedTraining, seed_head

    lin = make_system("online_linear", labels=toy.labels, seed=3).fit(empty_seed(toy))
    x = torch.zeros((0, toy.train.vecs.shape[1]), dtype=torch.float32)
    reference = seed_head(x, torch.zeros(0, dtype=torch.int64), len(toy.labels), SeedTraining(), 3)
    assert torch.equal(lin.head_.weight, reference.weight) and torch.equal(lin.head_.bias, reference.bias)
