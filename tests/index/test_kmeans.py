"""The coarse quantiser's k-means: two levels from TWO_LEVEL_FROM lists, seeded, with every
list given a share of the centroids in proportion to its group."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.index.kmeans import coarse_centroids, shares, two_level_kmeans

faiss = pytest.importorskip("faiss")


def test_shares_add_up_and_respect_the_group_sizes():
    for sizes, total in (([5, 0, 3, 100], 10), ([40, 40, 41], 121), ([7, 9000, 13], 64)):
        got = shares(np.array(sizes), total)
        assert got.sum() == min(total, sum(sizes))
        assert np.all(got <= np.array(sizes)) and np.all((got >= 1) == (np.array(sizes) > 0))
    assert shares(np.array([1, 1, 1]), 2).sum() == 2  # fewer centroids than groups: some get none
    assert list(shares(np.array([100, 300]), 8)) == [2, 6]


def test_two_level_kmeans_is_seeded_and_fits_the_clusters():
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    cent = rng.normal(size=(40, 16)).astype(np.float32)
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)
    lab = np.repeat(np.arange(40), 150)
    x = cent[lab] + 0.05 * rng.normal(size=(len(lab), 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a = two_level_kmeans(x, 160, seed=3, max_points_per_centroid=32)
    b = two_level_kmeans(x, 160, seed=3, max_points_per_centroid=32)
    assert a.shape == (160, 16) and np.array_equal(a, b)
    # every point is close to some centroid (as close as flat k-means gets it, within a margin)
    flat = coarse_centroids(x, 160, seed=3, max_points_per_centroid=32)  # below TWO_LEVEL_FROM: flat
    fit_two = (x @ a.T).max(axis=1).mean()
    fit_flat = (x @ flat.T).max(axis=1).mean()
    assert fit_two > 0.97 and fit_two > fit_flat - 0.01
