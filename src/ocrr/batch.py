"""Batch: the items a protocol hands to a system (vectors, optional texts, optional labels).

A core record: protocols build batches and systems read them, so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Batch:
    """Items handed to a system.

    ``vecs``: float32, L2-normalised, shape (n, d). ``texts``: the raw strings
    (text-level systems read these). ``labels``: true labels, when known.
    """

    vecs: np.ndarray
    texts: Sequence[str] | None = None
    labels: Sequence[str] | None = None

    def __len__(self) -> int:
        return int(self.vecs.shape[0])

    def __getitem__(self, index: int | slice | Sequence[int] | np.ndarray) -> Batch:
        """Rows selected by an int, slice or integer array."""
        if isinstance(index, (int, np.integer)):
            index = slice(int(index), int(index) + 1)
        if isinstance(index, slice):
            pick = lambda seq: None if seq is None else list(seq[index])  # noqa: E731
        else:
            index = np.asarray(index)
            if index.size == 0:  # np.asarray([]) is float, which numpy refuses as an index
                index = index.astype(np.intp)
            pick = lambda seq: None if seq is None else [seq[i] for i in index]  # noqa: E731
        return Batch(self.vecs[index], pick(self.texts), pick(self.labels))
