"""Data staging: each dataset loaded and embedded once per sweep, shared by every worker.

Embeddings are computed once in the parent; local workers memory-map one shared ``.npy``
read-only, Ray workers read them zero-copy from the object store.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.data import load_dataset
from ocrr.encoders import embed_dataset
from ocrr.encoders.cache import save_cached
from ocrr.engine.sweep.grid import Task
from ocrr.utils.paths import cache_root


@dataclass(frozen=True)
class SharedData:
    """What workers need for every task of one data key. Vectors live in one .npy file."""

    dataset: Any  # ocrr.data.records.Dataset without vectors (texts and labels only)
    vec_path: str  # float32 (n_train + n_test, d): train rows then test rows, unit length
    n_train: int
    encoder_id: str
    sha256: str


def prepare_data(
    tasks: Iterable[Task], data_dir: str | None = None, embed_progress=None, loaded: dict | None = None
) -> dict[str, SharedData]:
    """Load each dataset once, embed it once (the encoder's cache is filled), and save the
    normalised vectors where every worker can memory-map them. ``loaded`` maps a dataset
    name to a Dataset the caller already loaded (ocrr run checks availability first)."""
    out: dict[str, SharedData] = {}
    for task in tasks:
        if task.data_key in out:
            continue
        dataset = (loaded or {}).get(task.dataset)
        if dataset is None:
            dataset = load_dataset(task.dataset, data_dir=data_dir, **json.loads(task.data_options))
        encoder = "minilm" if task.encoder == "dataset" else task.encoder
        emb = embed_dataset(dataset, encoder, progress=embed_progress)
        path = cache_root() / "embeddings" / "shared" / f"{emb.sha256}.npy"
        if not _valid_npy(path, len(emb.train) + len(emb.test)):
            save_cached(path, np.concatenate([emb.train, emb.test]))
        stripped = dataclasses.replace(
            dataset,
            train=dataclasses.replace(dataset.train, vecs=None),
            test=dataclasses.replace(dataset.test, vecs=None),
        )
        out[task.data_key] = SharedData(stripped, str(path), len(emb.train), emb.encoder_id, emb.sha256)
    return out


def _valid_npy(path: Path, rows: int) -> bool:
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError):
        return False
    return arr.ndim == 2 and arr.shape[0] == rows and arr.dtype == np.float32


_VECS: dict[str, np.ndarray] = {}


def vectors(shared: SharedData) -> np.ndarray:
    """The shared vectors, memory-mapped once per process (a read-only page cache)."""
    if shared.vec_path not in _VECS:
        _VECS[shared.vec_path] = np.load(shared.vec_path, mmap_mode="r")
    return _VECS[shared.vec_path]


def load_for_scenario(name: str, options: dict, data_dir: str | None = None, encoder: str = "minilm"):
    """(dataset, train vectors, test vectors) in this process, from the embedding cache."""
    dataset = load_dataset(name, data_dir=data_dir, **options)
    emb = embed_dataset(dataset, encoder)
    return dataset, emb.train, emb.test
