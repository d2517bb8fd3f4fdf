"""The packaged encoders load offline and give unit vectors of their dimension; the ONNX
path reproduces the torch MiniLM; loading prints no progress bar; a missing extra is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ocrr.encoders import make_encoder
from ocrr.encoders.glove import tokens
from ocrr.encoders.packaged import distribution_file, require
from ocrr.errors import OcrrError

PACKAGED = {"minilm": 384, "minilm_int8": 384, "paraphrase_minilm_l3": 384, "glove": 50}
SENTENCES = [
    "How do I reset my card PIN?",
    "I forgot the pin number of my card",
    "The weather is lovely today",
    "what's my account balance",
]

# Loads every packaged encoder with the hub switched off, in a fresh process whose stderr is read.
_PROBE = """
import json, sys
import numpy as np
from ocrr.encoders import make_encoder
texts, out = json.loads(sys.stdin.read()), {}
for spec in sys.argv[1:]:
    vecs = make_encoder(spec).encode(texts)
    out[spec] = [list(vecs.shape), float(np.abs(np.linalg.norm(vecs, axis=1) - 1).max()), str(vecs.dtype)]
print(json.dumps(out))
"""


def test_packaged_encoders_load_offline_quietly():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *PACKAGED],
        input=json.dumps(SENTENCES),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for spec, dim in PACKAGED.items():
        shape, worst, dtype = result[spec]
        assert shape == [len(SENTENCES), dim] and dtype == "float32"
        assert worst < 1e-5  # unit vectors
    # quiet: no "Loading weights" bar (nor any tqdm bar) and no warnings from the libraries
    assert "Loading weights" not in done.stderr and "it/s]" not in done.stderr, done.stderr
    assert done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("spec", ["minilm_int8", "paraphrase_minilm_l3", "glove"])
def test_deterministic_and_meaningful(spec):
    encoder = make_encoder(spec)
    first = encoder.encode(SENTENCES)
    again = make_encoder(spec).encode(list(reversed(SENTENCES)))[::-1]
    assert first.tobytes() == encoder.encode(SENTENCES).tobytes()  # same call, same bytes
    assert np.allclose(first, again, atol=1e-5)  # a text's vector does not depend on its neighbours
    sims = first @ first.T
    assert sims[0, 1] > sims[0, 2] and sims[0, 1] > sims[1, 2]  # the paraphrase pair is closest


def test_onnx_path_reproduces_torch_minilm():
    """int8 MiniLM through our tokeniser and mean pooling ~ the torch model (checks the ONNX path)."""
    torch_vecs = make_encoder("minilm").encode(SENTENCES)
    onnx_vecs = make_encoder("minilm_int8").encode(SENTENCES)
    cosines = (torch_vecs * onnx_vecs).sum(axis=1)
    assert cosines.min() > 0.99


def test_batches_do_not_change_vectors():
    small = make_encoder("paraphrase_minilm_l3:batch_size=1").encode(SENTENCES)
    large = make_encoder("paraphrase_minilm_l3:batch_size=64").encode(SENTENCES)
    assert np.allclose(small, large, atol=1e-5)


def test_glove_tokens_and_unknown_words():
    assert tokens("Why don't I have my card's PIN?") == ["why", "do", "n't", "i", "have", "my", "card", "'s", "pin"]
    vecs = make_encoder("glove").encode(["qwxzvbnm", "card"])
    assert not vecs[0].any() and np.isclose(np.linalg.norm(vecs[1]), 1.0)  # no known word: the zero vector


def test_missing_extra_is_one_line():
    with pytest.raises(OcrrError) as err:
        require("ocrr_no_such_module", "no-such-package", "glove")
    text = str(err.value)
    assert "pip install -e '.[encoders]'" in text and "no-such-package" in text and "\n" not in text
    with pytest.raises(OcrrError, match=r"encoder x needs the package no-such-dist.*pip install -e '\.\[encoders\]'"):
        distribution_file("no-such-dist", ".onnx", "x")


def test_missing_onnxruntime_names_the_extra(monkeypatch):
    import importlib.util

    from ocrr.encoders import onnx_transformer

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(OcrrError, match=r"needs onnxruntime, which is not installed: pip install -e '\.\[encoders\]'"):
        onnx_transformer.OnnxEncoder("x", onnx_transformer.minilm_int8_file, max_length=8)
