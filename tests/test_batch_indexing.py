"""Batch indexing: an empty index list gives an empty batch, like an empty slice."""

import numpy as np
import pytest

from ocrr.batch import Batch


@pytest.fixture
def batch():
    vecs = np.arange(12, dtype=np.float32).reshape(4, 3)
    return Batch(vecs, ["a", "b", "c", "d"], ["x", "y", "x", "y"])


@pytest.mark.parametrize("empty", [[], (), np.array([]), np.array([], dtype=np.int64)])
def test_empty_index_list_gives_empty_batch(batch, empty):
    picked = batch[empty]
    assert len(picked) == 0
    assert picked.vecs.shape == (0, 3)
    assert picked.vecs.dtype == np.float32
    assert picked.texts == [] and picked.labels == []


def test_index_list_picks_rows_in_order(batch):
    picked = batch[[2, 0]]
    assert picked.vecs.tolist() == [[6, 7, 8], [0, 1, 2]]
    assert picked.texts == ["c", "a"] and picked.labels == ["x", "x"]


def test_empty_index_without_texts_or_labels(batch):
    bare = Batch(batch.vecs)
    picked = bare[[]]
    assert len(picked) == 0 and picked.texts is None and picked.labels is None
