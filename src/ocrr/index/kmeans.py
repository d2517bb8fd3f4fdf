"""The coarse quantiser's centroids: spherical k-means, flat or in two levels for many lists.

Flat k-means compares every training point with every centroid in every iteration: at 10M
entries (8192 lists, 262,144 training points, 10 iterations, dim 384) that is 16.5 TFLOP,
minutes on two cores. Two levels (the scheme FAISS uses for its billion-scale indexes):
k-means into ``round(sqrt(nlist))`` groups, then each group's points into a share of the
``nlist`` centroids proportional to the group's size. Each point then meets about
2 sqrt(nlist) centroids per iteration instead of nlist -- 45x fewer products at 8192 lists
-- and every centroid is still fitted to the points nearest it.

Deterministic: every k-means is seeded (``seed``, then ``seed + 1 + group``); the groups
are visited in order and the shares rounded by largest remainder, ties to the lower group.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

KMEANS_ITER = 10
#: From this many lists the coarse quantiser is trained in two levels (below it, flat k-means
#: costs seconds, and the small indexes keep the centroids they always had).
TWO_LEVEL_FROM = 1024


#: Groups of centroids an added vector is compared with, when the coarse quantiser searches
#: its centroids through an inverted file of their own (``ocrr.index.ivf``).
ADD_GROUPS = 2


def groups_to_probe(nprobe: int, nlist: int, n_groups: int) -> int:
    """Groups of centroids a query searches to find its ``nprobe`` nearest lists: enough to
    hold twice ``nprobe`` centroids on average, plus one, and at least ``ADD_GROUPS``."""
    return min(n_groups, max(ADD_GROUPS, math.ceil(2 * nprobe * n_groups / max(1, nlist)) + 1))


def _faiss() -> Any:
    import faiss  # imported lazily: only approximate backends need it

    return faiss


def flat_kmeans(x: np.ndarray, k: int, seed: int, max_points_per_centroid: int) -> np.ndarray:
    """FAISS spherical k-means of ``x`` into ``k`` centroids (k <= len(x))."""
    faiss = _faiss()
    km = faiss.Kmeans(
        x.shape[1],
        k,
        niter=KMEANS_ITER,
        seed=seed,
        spherical=True,
        max_points_per_centroid=max_points_per_centroid,
        min_points_per_centroid=1,
    )
    km.train(np.ascontiguousarray(x, np.float32))
    return np.asarray(km.centroids, np.float32)


def shares(sizes: np.ndarray, total: int) -> np.ndarray:
    """``total`` split over groups in proportion to ``sizes`` (largest remainder), each
    non-empty group at least 1 and at most its size."""
    sizes = np.asarray(sizes, np.int64)
    want = sizes * total / max(1, int(sizes.sum()))
    out = np.minimum(np.maximum(np.floor(want).astype(np.int64), (sizes > 0).astype(np.int64)), sizes)
    while out.sum() < total and (out < sizes).any():
        room = out < sizes
        gap = np.where(room, want - out, -np.inf)
        out[int(np.argmax(gap))] += 1  # argmax: the lowest group among equal gaps
    while out.sum() > total:
        spare = out > 1
        gap = np.where(spare, out - want, -np.inf)
        out[int(np.argmax(gap))] -= 1
    return out


def two_level_kmeans(x: np.ndarray, k: int, seed: int, max_points_per_centroid: int) -> np.ndarray:
    """``k`` spherical centroids of ``x``: ``round(sqrt(k))`` groups, then k-means in each."""
    faiss = _faiss()
    x = np.ascontiguousarray(x, np.float32)
    n_groups = max(2, int(round(np.sqrt(k))))
    top = flat_kmeans(x, n_groups, seed, max_points_per_centroid=max(1, len(x) // n_groups))
    nearest = faiss.IndexFlatIP(x.shape[1])
    nearest.add(top)
    _, group = nearest.search(x, 1)
    group = group.reshape(-1)
    k_of = shares(np.bincount(group, minlength=n_groups), k)
    parts = []
    # One OpenMP thread for the small k-means runs: on a busy box their thread hand-offs cost
    # more than the arithmetic (docs/reference/measurements.md).
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        for g in range(n_groups):
            if k_of[g] == 0:
                continue
            members = x[group == g]
            if k_of[g] == len(members):
                parts.append(members / np.linalg.norm(members, axis=1, keepdims=True))
            else:
                parts.append(flat_kmeans(members, int(k_of[g]), seed + 1 + g, max_points_per_centroid))
    finally:
        faiss.omp_set_num_threads(threads)
    return np.ascontiguousarray(np.concatenate(parts), np.float32)


def coarse_centroids(x: np.ndarray, k: int, seed: int, max_points_per_centroid: int) -> np.ndarray:
    """The coarse quantiser's ``k`` centroids: two levels from ``TWO_LEVEL_FROM`` lists."""
    if k >= TWO_LEVEL_FROM:
        return two_level_kmeans(x, k, seed, max_points_per_centroid)
    return flat_kmeans(x, k, seed, max_points_per_centroid)
