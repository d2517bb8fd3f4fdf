"""The encoder protocol: texts in, L2-normalised float32 rows out."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    id: str  # stable identity, part of every embedding-cache key and result row

    def encode(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray: ...


def l2_normalise(vecs: np.ndarray) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return np.ascontiguousarray(vecs / np.where(norms == 0, 1.0, norms), dtype=np.float32)
