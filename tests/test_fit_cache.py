"""The seed-state disk cache returns exactly what a fresh fit gives, and is keyed tightly."""

import os
from pathlib import Path

import numpy as np

from ocrr.systems import Batch, make_system
from ocrr.systems.fit_cache import cached_fit
from tests.conftest import clustered_dataset


def test_cached_river_seed_model_equals_a_fresh_fit(monkeypatch):
    ds = clustered_dataset(n_classes=6, dim=8, n_train=20, n_test=5)
    seed = Batch(ds.train.vecs, None, list(ds.train.labels))
    queries = Batch(ds.test.vecs)
    fresh = make_system("river_logreg:subsample=60", seed=1).fit(seed)  # builds and stores
    assert len(list(Path(os.environ["OCRR_CACHE_DIR"]).glob("fitted/river/*.pkl"))) == 1
    before = fresh.predict(queries)
    loaded = make_system("river_logreg:subsample=60", seed=1).fit(seed)  # loads
    assert loaded.predict(queries) == before
    for label, clf in fresh.model_.classifiers.items():
        assert loaded.model_.classifiers[label].weights == clf.weights
    # both continue identically after corrections
    item = Batch(ds.test.vecs[:3], None, ["new", "new", "new"])
    fresh.correct(item)
    loaded.correct(item)
    assert loaded.predict(queries) == fresh.predict(queries)
    # another seed (another subsample) is another key
    make_system("river_logreg:subsample=60", seed=2).fit(seed)
    assert len(list(Path(os.environ["OCRR_CACHE_DIR"]).glob("fitted/river/*.pkl"))) == 2
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    assert make_system("river_logreg:subsample=60", seed=1).fit(seed).predict(queries) == before


def test_cache_keys_cover_every_part():
    calls = []

    def build(value):
        calls.append(value)
        return value

    assert cached_fit("t", ["a", b"\x00"], lambda: build(1)) == 1
    assert cached_fit("t", ["a", b"\x00"], lambda: build(2)) == 1  # loaded, not rebuilt
    assert cached_fit("t", ["a\x00"], lambda: build(3)) == 3  # length-prefixed: no collision
    assert calls == [1, 3]
    assert np.array_equal(cached_fit("t", ["arr"], lambda: np.arange(3)), np.arange(3))
