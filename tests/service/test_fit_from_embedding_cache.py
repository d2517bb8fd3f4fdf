"""``ocrr serve --fit`` seeds from the embedding cache: the demo's train texts are encoded
once, by the first start, never again under the same encoder id; the seeded ledger is the
same whether or not an ``ocrr run`` cached its own vectors first."""

from __future__ import annotations

import numpy as np
import pytest
from tests.service.service_helpers import TOKEN, HashingEncoder

from ocrr.data import load_dataset
from ocrr.encoders.cache import cache_path, save_cached, texts_sha256
from ocrr.service.config import ServiceConfig
from ocrr.service.state import build_state


class CountingEncoder(HashingEncoder):
    """The hashing encoder, counting the texts it is asked to encode."""

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, texts, progress=None) -> np.ndarray:
        self.encoded += len(texts)
        return super().encode(texts, progress)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("OCRR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fitted(path, encoder, said=None):
    config = ServiceConfig(ledger=path, token=TOKEN, fit="demo")
    return build_state(config, encoder=encoder, log=(said.append if said is not None else lambda m: None))


def test_the_second_fit_reads_the_cache_and_seeds_the_same_ledger(tmp_path, cache_dir):
    n_train = len(load_dataset("demo").train)
    first_encoder, said = CountingEncoder(), []
    first = fitted(tmp_path / "a.db", first_encoder, said)
    try:
        assert first_encoder.encoded == 1 + n_train  # the warm-up, then the train texts
        first_root = first.substrate.ledger.root()  # over every entry's label, text and vector
    finally:
        first.close()
    assert any("encoding" in line for line in said)

    second_encoder, said = CountingEncoder(), []
    second = fitted(tmp_path / "b.db", second_encoder, said)
    try:
        assert second_encoder.encoded == 1  # the warm-up only: the train texts came from the cache
        assert any("from the embedding cache" in line for line in said)
        assert second.substrate.ledger.root() == first_root
    finally:
        second.close()


def test_the_file_ocrr_run_caches_is_not_used_so_the_root_is_the_same_either_way(tmp_path, cache_dir):
    """A run encodes with all the machine's threads, the service's encoder with one: their
    vectors differ in the last bits (here: a run's file whose vectors differ by 1e-6)."""
    demo = load_dataset("demo")
    alone = fitted(tmp_path / "alone.db", CountingEncoder())
    try:
        root = alone.substrate.ledger.root()
    finally:
        alone.close()
    for path in cache_dir.rglob("*"):
        if path.is_file():
            path.unlink()  # as if the service had never started
    texts = list(demo.train.texts) + list(demo.test.texts)
    ran = HashingEncoder().encode(texts)
    ran[:, 0] += 1e-6
    save_cached(cache_path(HashingEncoder.id, texts_sha256(texts)), ran)
    encoder = CountingEncoder()
    state = fitted(tmp_path / "after-a-run.db", encoder)
    try:
        assert encoder.encoded == 1 + len(demo.train)  # its own encoding, not the run's vectors
        assert state.substrate.ledger.root() == root
    finally:
        state.close()


def test_another_encoder_id_does_not_read_the_cache(tmp_path, cache_dir):
    fitted(tmp_path / "a.db", CountingEncoder()).close()

    class Other(CountingEncoder):
        id = "test-hashing-other"

    other = Other()
    fitted(tmp_path / "b.db", other).close()
    assert other.encoded == 1 + len(load_dataset("demo").train)
