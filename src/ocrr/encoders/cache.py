"""On-disk embedding cache: one .npy per (encoder id, exact list of texts).

The key is sha256 over the encoder id and every text (length-prefixed UTF-8), so a
changed text, order or encoder never reuses stale vectors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ocrr.utils.files import atomic_write
from ocrr.utils.paths import cache_root


def texts_sha256(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for text in texts:
        raw = text.encode("utf-8")
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def cache_path(encoder_id: str, texts_sha: str, root: Path | None = None) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder_id)[:60]
    id_sha = hashlib.sha256(encoder_id.encode("utf-8")).hexdigest()[:8]
    return (root or cache_root() / "embeddings") / f"{slug}-{id_sha}" / f"{texts_sha}.npy"


def load_cached(path: Path, n_rows: int) -> np.ndarray | None:
    if not path.exists():
        return None
    try:
        vecs = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None  # a torn write: recompute
    return vecs if vecs.ndim == 2 and vecs.shape[0] == n_rows and vecs.dtype == np.float32 else None


def save_cached(path: Path, vecs: np.ndarray) -> None:
    """Write atomically so an interrupted run never leaves a half file behind."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as out:
            np.save(out, np.ascontiguousarray(vecs, dtype=np.float32), allow_pickle=False)

    atomic_write(path, write)
