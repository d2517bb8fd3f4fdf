"""Quiet loading hides bars and chatter, not errors, and gives the settings back; the embedding
cache keeps the measured encoding cost beside the vectors."""

from __future__ import annotations

import logging

import pytest

from ocrr.data.records import Split, make_dataset
from ocrr.encoders import embed_dataset
from ocrr.encoders.cost import cost_path
from ocrr.encoders.quiet import quiet_loading
from ocrr.encoders.sentence_transformer import SentenceTransformerEncoder
from ocrr.errors import OcrrError


def test_settings_come_back():
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    before = (hf_logging.get_verbosity(), logging.getLogger("sentence_transformers").level)
    with quiet_loading():
        assert not hf_logging.is_progress_bar_enabled()
        assert logging.getLogger("sentence_transformers").level == logging.ERROR
    assert hf_logging.is_progress_bar_enabled()
    assert (hf_logging.get_verbosity(), logging.getLogger("sentence_transformers").level) == before


def test_errors_are_not_hidden(tmp_path):
    encoder = SentenceTransformerEncoder("missing", path=str(tmp_path / "no-model-here"))
    with pytest.raises(OcrrError, match=r"could not load the sentence-transformers model 'missing'"):
        encoder.encode(["hello"])


def _dataset():
    texts = ("open an account", "close my account", "card lost", "card stolen", "hello there")
    labels = ("open", "close", "lost", "lost", "hi")
    return make_dataset("tiny", Split(labels=labels[:3], texts=texts[:3]), Split(labels=labels[3:], texts=texts[3:]))


def test_cost_is_recorded_and_read_back(tmp_path):
    first = embed_dataset(_dataset(), "glove", cache_dir=tmp_path)
    assert first.source == "encoded" and first.cost is not None
    assert first.cost.encoder == "glove" and first.cost.texts == 5
    assert first.cost.encode_seconds >= 0 and first.cost.load_seconds >= 0 and first.cost.threads >= 1
    files = list(tmp_path.glob("glove-*/*.npy"))
    assert len(files) == 1 and cost_path(files[0]).is_file()
    again = embed_dataset(_dataset(), "glove", cache_dir=tmp_path)
    assert again.source == "cache" and again.cost == first.cost and again.sha256 == first.sha256


def test_vectors_cached_without_a_cost_file_still_load(tmp_path):
    first = embed_dataset(_dataset(), "glove", cache_dir=tmp_path)
    cost_path(next(tmp_path.glob("glove-*/*.npy"))).unlink()  # as an older ocrr left them
    again = embed_dataset(_dataset(), "glove", cache_dir=tmp_path)
    assert again.source == "cache" and again.cost is None and again.sha256 == first.sha256


def test_an_unreachable_model_fails_before_encoding_starts(tmp_path, monkeypatch):
    """Offline, a model neither packaged nor in the Hugging Face cache fails at once with its clear
    error: no progress bar sitting at 0/N while the hub is retried."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = []
    with pytest.raises(OcrrError, match=r"could not load the sentence-transformers model 'someone/no-such-model'"):
        embed_dataset(_dataset(), "st:someone/no-such-model", progress=started.append, cache_dir=tmp_path)
    assert started == []  # the bar never started
