"""The seed-state disk cache returns exactly what a fresh fit gives, and is keyed tightly."""

import os
from pathlib import Path

import numpy as np
from tests.conftest import clustered_dataset

from ocrr.systems import Batch, make_system
from ocrr.systems.fit_cache import cached_fit


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


def _slow_build(marker: str) -> int:
    import time

    with open(marker, "a") as fh:  # one line per build actually run
        fh.write("built\n")
    time.sleep(0.5)
    return 42


def _ask(marker: str) -> int:
    import functools

    return cached_fit("race", ["same key"], functools.partial(_slow_build, marker))


def test_concurrent_requests_for_one_key_build_it_once(tmp_path):
    import multiprocessing as mp

    marker = str(tmp_path / "builds.txt")
    # Fresh interpreters: a fork of pytest's process inherits its other threads' locks held
    # (a thread another test left running), and can wait on them forever. OCRR_CACHE_DIR is
    # inherited from the test fixture through the environment.
    with mp.get_context("spawn").Pool(3) as pool:
        assert pool.map(_ask, [marker] * 3) == [42, 42, 42]
    assert Path(marker).read_text().splitlines() == ["built"]


def test_seed_head_from_the_disk_cache_equals_a_fresh_training(monkeypatch):
    import torch

    from ocrr.systems.heads import training

    ds = clustered_dataset(n_classes=6, dim=8, n_train=20, n_test=5)
    x, y = torch.from_numpy(ds.train.vecs), torch.arange(len(ds.train.vecs)) % 6
    cfg = training.SeedTraining(epochs=3)
    monkeypatch.setattr(training, "_SEED_HEADS", type(training._SEED_HEADS)())
    fresh = training.seed_head(x, y, 6, cfg, seed=4)  # trains and stores
    assert len(list(Path(os.environ["OCRR_CACHE_DIR"]).glob("fitted/seed-head/*.pkl"))) == 1
    training._SEED_HEADS.clear()  # as in another worker process
    loaded = training.seed_head(x, y, 6, cfg, seed=4)
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    training._SEED_HEADS.clear()
    retrained = training.seed_head(x, y, 6, cfg, seed=4)
    for name, value in fresh.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value)
        assert torch.equal(retrained.state_dict()[name], value)
    assert not torch.equal(fresh.weight, training.seed_head(x, y, 6, cfg, seed=5).weight)
