"""The System protocol every classifier under test implements, and its inputs.

A system is fitted once on the seed set (its "upstream" state), then sees a stream:
``predict`` is called on each item and, when the correction policy says so,
``correct`` with the true label. Evaluation calls ``predict`` on whole eval sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError


@dataclass(frozen=True)
class Footprint:
    """What a system stores: retrieval entries, trainable parameters, bytes in memory."""

    entries: int = 0
    params: int = 0
    bytes: int = 0
    extra: dict = field(default_factory=dict)


@runtime_checkable
class System(Protocol):
    name: str

    def fit(self, seed: Batch) -> "System": ...

    def predict(self, batch: Batch) -> list[str | None]: ...

    def correct(self, batch: Batch) -> None: ...

    def footprint(self) -> Footprint: ...


def check_vectors(vecs: np.ndarray, dim: int | None, what: str = "vectors") -> np.ndarray:
    """Validate a batch of vectors: 2-D, finite, the expected dimension; return float32.

    Raises OcrrError naming the fix; never lets a wrong shape or a NaN reach a score.
    """
    arr = np.asarray(vecs)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise OcrrError(f"{what} must be a 2-D array (n, d); got shape {arr.shape}. Pass one row per item.")
    if dim is not None and arr.shape[1] != dim:
        raise OcrrError(
            f"{what} have dimension {arr.shape[1]} but this system was fitted on dimension {dim}. "
            "Encode queries with the same encoder as the seed set (see --encoder)."
        )
    if not np.isfinite(arr).all():  # the method, not np.all: this runs once per correction
        bad = int(np.flatnonzero(~np.all(np.isfinite(arr), axis=1))[0])
        raise OcrrError(
            f"{what} row {bad} contains NaN or infinity. Check the encoder output or the precomputed "
            "embedding file; ocrr will not score non-finite vectors."
        )
    if arr.dtype == np.float32 and arr.flags.c_contiguous:
        return arr
    return np.ascontiguousarray(arr, dtype=np.float32)


def require_labels(batch: Batch, who: str) -> Sequence[str]:
    if batch.labels is None or len(batch.labels) != len(batch):
        raise OcrrError(f"{who}.correct needs one label per item; the batch has none. Pass Batch(..., labels=[...]).")
    return batch.labels
