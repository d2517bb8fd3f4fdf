"""``vectors_b64`` of one length without padding is decoded in one call, and kept in float32:
the same rows as decoding each vector, and the same refusals."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.service.schemas import CorrectRequest, _unpack


def _each(packed: list[str]) -> np.ndarray:
    raws = [base64.b64decode(v, validate=True) for v in packed]
    return np.frombuffer(b"".join(raws), "<f4").reshape(len(raws), -1).astype(np.float32)


@pytest.mark.parametrize("dim", [1, 2, 3, 6, 384])  # 3: padding; 6: 24 bytes, no padding
def test_one_decode_gives_the_rows_of_decoding_each(dim):
    vecs = np.random.default_rng(dim).standard_normal((7, dim)).astype("<f4")
    packed = [base64.b64encode(r.tobytes()).decode() for r in vecs]
    got = _unpack(packed)
    assert got.dtype == np.float32 and got.tobytes() == _each(packed).tobytes()
    sent = CorrectRequest(vectors_b64=packed, labels=["a"] * 7).sent_vectors()
    assert sent is not None and sent.tobytes() == vecs.tobytes()


def test_a_vector_that_is_not_finite_is_refused():
    bad = np.array([[1.0, np.nan]], "<f4")
    with pytest.raises(OcrrError, match="NaN"):
        CorrectRequest(vectors_b64=[base64.b64encode(bad.tobytes()).decode()], labels=["a"]).sent_vectors()


@pytest.mark.parametrize(
    "packed",
    [
        ["AAAAAAAAAAAAAAAA", "AAAAAAAA!AAAAAAA"],  # not base64, in the second vector only
        ["AAAAAAAAAAAAAAAA", "AAAAAAAA AAAAAAA"],
        ["AAAAAAAAAAAAAAAA", "AAAAAAAAAAAA"],  # two lengths
        ["AAAAAAAAAAAA", "AAAAAAAAAAAA"],  # 9 bytes: not whole float32 values
    ],
)
def test_what_is_not_base64_floats_is_still_refused(packed):
    with pytest.raises(OcrrError, match="vectors_b64"):
        _unpack(packed)
