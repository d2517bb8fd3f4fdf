"""Synthetic embedding-only data: Gaussian clusters around random unit centroids.

Class ``c`` has a centroid drawn from a standard normal in ``dim`` dimensions and
normalised to unit length; each item is centroid + N(0, sigma^2) noise in every
dimension, then L2-normalised (float32), like a sentence encoder's output.

Mind sigma at high dim: the noise is sigma *per dimension*, so its norm is
about ``sigma * sqrt(dim)`` against the unit centroid (dim=64, sigma=0.3: ~2.4).
Along the line between two centroids the noise is still only sigma, but
anything estimated from items (class means, kNN or few-shot similarities) gets
noisier as dim grows. With the defaults otherwise (20 classes, 50 per class,
seed 0), sigma=0.3 gives nearest-class-mean test accuracy ~0.87 at dim=64
but ~0.73 at dim=384, and 1-shot prototypes ~0.31 vs ~0.12. For a realistic
task at encoder-like dims (384+) use a small sigma: ``sigma = r / sqrt(dim)``
keeps the noise-to-centroid norm ratio at r (dim=384, sigma=0.12: ~1.0 / ~0.85).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from ocrr.data.records import Dataset, Split, make_dataset
from ocrr.errors import OcrrError

MAX_DIM = 1 << 16  # as a ledger's (ocrr.ledger.rows.MAX_DIM): more only fills memory
# What one dataset may hold, train and test together: rows (each keeps a label reference) and
# values (rows x dim, float32 in the end; a split is drawn in float64, several arrays of its
# size at once). Past these a run fills memory or stalls before its first correction.
MAX_ROWS = 10_000_000
MAX_VALUES = 1 << 30


def make_synthetic(
    n_classes: int = 20,
    dim: int = 64,
    n_train_per_class: int = 50,
    n_test_per_class: int = 20,
    sigma: float = 0.3,
    seed: int = 0,
) -> Dataset:
    """A class-incremental-ready embedding dataset, deterministic from ``seed``.

    Labels are "c000", "c001", ... (zero-padded, so sorted order is class
    order); each split lists class 0's items first, then class 1's, and so on.
    """
    _check(
        n_classes=n_classes,
        dim=dim,
        n_train_per_class=n_train_per_class,
        n_test_per_class=n_test_per_class,
        sigma=sigma,
    )
    rng = np.random.default_rng(seed)
    centroids = _unit(rng.standard_normal((n_classes, dim)))
    width = max(3, len(str(n_classes - 1)))
    names = [f"c{k:0{width}d}" for k in range(n_classes)]

    def split(per_class: int) -> Split:
        noise = rng.standard_normal((n_classes * per_class, dim))
        vecs = _unit(np.repeat(centroids, per_class, axis=0) + sigma * noise).astype(np.float32)
        labels = tuple(name for name in names for _ in range(per_class))
        return Split(labels=labels, vecs=vecs)

    train = split(n_train_per_class)  # drawn first, so test never shifts train
    test = split(n_test_per_class)
    notes = (
        f"Synthetic Gaussian clusters: {n_classes} classes, dim={dim}, sigma={sigma} per dimension "
        f"(noise norm ~{sigma * dim**0.5:.2f} vs unit centroids), {n_train_per_class} train / "
        f"{n_test_per_class} test per class, seed={seed}; embeddings only."
    )
    return make_dataset("synthetic", train=train, test=test, notes=notes)


def check_synthetic(**options: Any) -> None:
    """Refuse, naming the fix, what ``make_synthetic(**options)`` would refuse (its defaults for
    the options not given), without drawing anything."""
    given = inspect.signature(make_synthetic).bind(**options)
    given.apply_defaults()
    given.arguments.pop("seed")
    _check(**given.arguments)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _check(**values: float) -> None:
    minimum = {"n_classes": 2, "dim": 1, "n_train_per_class": 1, "n_test_per_class": 1}
    for option, low in minimum.items():
        value = values[option]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise OcrrError(
                f"synthetic option {option} must be a whole number >= {low}, got {value!r}. "
                f"Pass {option}={low} or more."
            )
    if values["dim"] > MAX_DIM:
        raise OcrrError(f"synthetic option dim must be at most {MAX_DIM}, got {values['dim']!r}. Pass a smaller dim.")
    sigma = values["sigma"]
    if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.integer, np.floating)) or not sigma >= 0:
        raise OcrrError(f"synthetic option sigma must be a number >= 0, got {sigma!r}. Pass sigma=0 or more.")
    n_classes, dim = int(values["n_classes"]), int(values["dim"])
    rows = n_classes * (int(values["n_train_per_class"]) + int(values["n_test_per_class"]))
    made = f"n_classes × (n_train_per_class + n_test_per_class) = {rows:,} rows"
    if rows > MAX_ROWS:
        raise OcrrError(
            f"synthetic options give {made}, more than the {MAX_ROWS:,} it generates at most. "
            "Pass a smaller n_classes, n_train_per_class or n_test_per_class."
        )
    if rows * dim > MAX_VALUES:
        raise OcrrError(
            f"synthetic options give {made} of dim {dim}, {rows * dim:,} values, more than the {MAX_VALUES:,} "
            "it generates at most. Pass a smaller dim, n_classes, n_train_per_class or n_test_per_class."
        )
