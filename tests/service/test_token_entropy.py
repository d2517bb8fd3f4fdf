"""The service token needs 128 bits of entropy, not 128 bits of length: random tokens of
each usual form pass, regular ones (one character, a short alphabet, a sequence, a
repeat) are refused naming how to make a good one, and a UUID (122 random bits) is refused."""

from __future__ import annotations

import base64
import random
import uuid

import pytest

from ocrr.errors import OcrrError
from ocrr.service.config import ServiceConfig

# Each form as ``secrets`` makes it from its random bytes, here from a seeded generator: a
# truly random token_urlsafe(16) may by chance use only lowercase letters and digits (about
# one in 300,000), which the estimate rightly counts as fewer bits; the same tokens every run.
RANDOM_FORMS = {
    "token_hex(16)": lambda rng: rng.randbytes(16).hex(),  # 32 hex digits: 128 bits exactly
    "token_hex(16), uppercase": lambda rng: rng.randbytes(16).hex().upper(),
    "token_hex(32)": lambda rng: rng.randbytes(32).hex(),
    "token_urlsafe(16)": lambda rng: _urlsafe(rng.randbytes(16)),  # 22 characters: 132 bits
    "token_urlsafe(32)": lambda rng: _urlsafe(rng.randbytes(32)),  # what ocrr makes and advises
}


def _urlsafe(raw: bytes) -> str:
    """``secrets.token_urlsafe``'s text of these bytes."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@pytest.mark.parametrize("form", sorted(RANDOM_FORMS))
def test_random_tokens_of_every_usual_form_are_taken(tmp_path, form):
    rng = random.Random(f"ocrr token {form}")
    for _ in range(200):
        token = RANDOM_FORMS[form](rng)
        assert ServiceConfig(ledger=tmp_path / "l.db", token=token).token == token


@pytest.mark.parametrize(
    "token, why",
    [
        ("0" * 34, r"about 113 bits: 34 characters of decimal digits"),
        ("z" * 40, r"uses 1 different character"),
        ("Az" * 20, r"uses 2 different character"),
        ("0123456789abcdef" * 2, r"run in sequence or repeat"),
        ("abcdefghijklmnopqrstuvwxyz012345", r"run in sequence or repeat"),
        ("test-token-0123456789abcdef", r"run in sequence or repeat"),
        ("a8f3b2c9d4e7" * 3, r"repeats itself|different character"),
        ("773a78c8be0d0c6c" * 2, r"repeats itself"),  # 64 random bits pasted twice
        ("9adcf662c9bf66fea25dfb86" * 2, r"repeats itself: 24 of its characters equal the one 24 place"),
    ],
)
def test_regular_tokens_are_refused_naming_the_fix(tmp_path, token, why):
    with pytest.raises(OcrrError, match=rf"too weak \(.*({why}).*at least 128 bits needed.*token_urlsafe\(32\)"):
        ServiceConfig(ledger=tmp_path / "l.db", token=token)


def test_a_uuid4_is_refused_for_its_122_random_bits(tmp_path):
    with pytest.raises(OcrrError, match=r"a UUID holds at most 122 random bits; at least 128 bits needed"):
        ServiceConfig(ledger=tmp_path / "l.db", token=str(uuid.uuid4()))
