"""``vectors_b64`` decode exactly as strict ``binascii`` does, whichever decoder runs.

A request's vectors, joined, are decoded by pydantic-core when they hold no "-" or "_"
(``schemas._decode_unpadded``): every string it accepts must give binascii's bytes, and every
string binascii refuses must be refused (the per-vector decode then names the error).
"""

from __future__ import annotations

import base64
import binascii

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.service import schemas

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
ODD = '-_ \n\t.é\\"*%~\x00'  # URL-safe, whitespace, non-ASCII, a JSON escape, others


def _strict(text: str) -> bytes | None:
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def test_the_fast_decoder_is_in_use():
    assert schemas._BASE64 is not None  # the pydantic this project installs has one


def test_unpadded_quads_decode_as_binascii_does():
    rng = np.random.default_rng(0)
    for n in range(0, 3000, 3):  # valid base64 of random bytes (whole quads: no padding)
        raw = rng.bytes(n)
        text = base64.b64encode(raw).decode()
        assert schemas._decode_unpadded(text) == raw == _strict(text)
    pool = ALPHABET + ODD
    weights = np.r_[np.full(len(ALPHABET), 1.0), np.full(len(ODD), 4.0)]
    for _ in range(20_000):  # whole quads of mostly-valid characters, with odd ones here and there
        picks = rng.choice(len(pool), 4 * int(rng.integers(1, 6)), p=weights / weights.sum())
        text = "".join(pool[i] for i in picks)
        assert schemas._decode_unpadded(text) == _strict(text), text


@pytest.mark.parametrize("odd", ["-", "_", " ", "é", "\\"])
def test_a_vector_not_in_standard_base64_gets_the_400_that_names_the_form(odd):
    good = base64.b64encode(np.arange(6, dtype="<f4").tobytes()).decode()
    with pytest.raises(OcrrError, match="not base64"):
        schemas._unpack([good, odd + good[1:]])
