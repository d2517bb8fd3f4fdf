"""The dataset record every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Split:
    """One split of a dataset, items in the source file's order.

    ``texts`` is None for embedding-only data (the synthetic generator); then
    ``vecs`` holds the L2-normalised float32 embeddings. ``languages`` gives each item's
    language where a dataset mixes several (Leyzer's source/target pairs); None otherwise.
    """

    labels: tuple[str, ...]
    texts: tuple[str, ...] | None = None
    vecs: np.ndarray | None = None
    languages: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Dataset:
    """A labelled intent dataset: train and test splits plus metadata.

    ``labels`` is the sorted list of every class name (train ∪ test).
    ``domains`` maps a label to its domain where the dataset defines one
    (CLINC150); empty otherwise.
    ``files`` maps each source file name to its sha256, for ``config.json``.
    """

    name: str
    train: Split
    test: Split
    labels: tuple[str, ...]
    domains: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    @property
    def has_text(self) -> bool:
        return self.train.texts is not None


def make_dataset(name: str, train: Split, test: Split, **kwargs: Any) -> Dataset:
    """Build a Dataset whose label list is the sorted union of both splits."""
    labels = tuple(sorted(set(train.labels) | set(test.labels)))
    return Dataset(name=name, train=train, test=test, labels=labels, **kwargs)
