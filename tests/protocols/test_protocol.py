"""The held-out-class protocol's invariants, and its exact recipe (seed-for-seed with the authors)."""

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.errors import OcrrError
from ocrr.protocols import heldout_scenario


@pytest.fixture
def ds():
    return clustered_dataset(n_classes=25, dim=8, n_train=12, n_test=30)  # 750 test items: caps apply


def scenario(ds, seed, **kw):
    return heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed, **kw)


def test_classes_are_split_cleanly(ds):
    sc = scenario(ds, 4)
    held = set(sc.heldout)
    assert len(held) == 10
    assert not held & set(sc.seed_set.labels)
    assert set(sc.stream.labels) == held
    assert set(sc.eval_sets["novel"].labels) <= held
    assert not held & set(sc.eval_sets["original"].labels)
    assert len(sc.seed_set) == 15 * 12 and len(sc.stream) == 10 * 12
    assert len(sc.eval_sets["original"]) == 400  # 450 capped
    assert len(sc.eval_sets["novel"]) == 300  # not capped
    assert sc.labels == ds.labels


def test_recipe_matches_the_published_harness(ds):
    seed = 7
    labels = sorted(set(ds.train.labels) | set(ds.test.labels))
    held = {labels[i] for i in np.random.default_rng(seed).choice(len(labels), size=10, replace=False)}
    orig = [i for i, label in enumerate(ds.test.labels) if label not in held]
    nov = [i for i, label in enumerate(ds.test.labels) if label in held]
    stream = [i for i, label in enumerate(ds.train.labels) if label in held]
    rng = np.random.default_rng(seed)
    orig = np.array(orig)[rng.choice(len(orig), size=400, replace=False)]  # novel (300) is not capped
    stream = np.array(stream)[rng.permutation(len(stream))]
    sc = scenario(ds, seed)
    np.testing.assert_array_equal(sc.eval_sets["original"].vecs, ds.test.vecs[orig])
    np.testing.assert_array_equal(sc.eval_sets["novel"].vecs, ds.test.vecs[nov])
    np.testing.assert_array_equal(sc.stream.vecs, ds.train.vecs[stream])
    assert list(sc.stream.texts) == [ds.train.texts[i] for i in stream]
    # the seed set keeps file order
    seed_idx = [i for i, label in enumerate(ds.train.labels) if label not in held]
    np.testing.assert_array_equal(sc.seed_set.vecs, ds.train.vecs[seed_idx])


def test_same_seed_same_split_other_seed_other_split(ds):
    a, b, c = scenario(ds, 1), scenario(ds, 1), scenario(ds, 2)
    assert a.heldout == b.heldout and list(a.stream.labels) == list(b.stream.labels)
    assert a.heldout != c.heldout


def test_options(ds):
    sc = scenario(ds, 0, n_heldout=3, eval_cap=None)
    assert len(sc.heldout) == 3 and len(sc.eval_sets["original"]) == 22 * 30
    with pytest.raises(OcrrError, match="choose between 1 and 24"):
        scenario(ds, 0, n_heldout=25)
