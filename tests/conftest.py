"""Shared fixtures: small datasets the tests make, and an isolated user cache."""

from __future__ import annotations

import pytest

from ocrr.checks.data import clustered_splits
from ocrr.data.records import Split, make_dataset
from ocrr.utils.paths import cache_root

# The real user cache, captured before tests isolate it: real-data tests reuse its embeddings
# (a fresh clone's first run encodes the real datasets once and keeps them there).
USER_CACHE = cache_root()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty user cache and no network downloads."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("OCRR_OFFLINE", "1")


@pytest.fixture
def user_cache():
    """The real user cache, for tests that should share its embeddings across runs."""
    return USER_CACHE


def clustered_dataset(n_classes=12, dim=16, n_train=30, n_test=10, noise=0.05, seed=0, name="toy"):
    """Well-separated clusters with texts, so both vector and text paths can be exercised."""
    train, test = clustered_splits(n_classes, dim, (n_train, n_test), noise, seed)
    return make_dataset(name, Split(*train), Split(*test))


@pytest.fixture
def toy():
    return clustered_dataset()
