"""Shared fixtures: small datasets the tests make, and an isolated user cache."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.data.records import Split, make_dataset
from ocrr.paths import cache_root

# The real user cache, captured before tests isolate it: real-data tests reuse its embeddings.
USER_CACHE = cache_root()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own empty user cache and no network downloads."""
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("OCRR_OFFLINE", "1")


def clustered_dataset(n_classes=12, dim=16, n_train=30, n_test=10, noise=0.05, seed=0, name="toy"):
    """Well-separated clusters with texts, so both vector and text paths can be exercised."""
    rng = np.random.default_rng(seed)
    centroids = rng.standard_normal((n_classes, dim))
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)

    def split(n, tag):
        labels, texts, vecs = [], [], []
        for c in range(n_classes):
            for i in range(n):
                labels.append(f"class_{c:02d}")
                texts.append(f"{tag} item {i} of class {c}")
                vecs.append(centroids[c] + noise * rng.standard_normal(dim))
        order = rng.permutation(len(labels))  # file order interleaves classes
        vecs = np.asarray(vecs, np.float32)[order]
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return Split(tuple(labels[i] for i in order), tuple(texts[i] for i in order), vecs)

    return make_dataset(name, split(n_train, "train"), split(n_test, "test"))


@pytest.fixture
def toy():
    return clustered_dataset()
