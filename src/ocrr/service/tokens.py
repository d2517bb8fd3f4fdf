"""How strong a bearer token is: ``token_weakness(token)`` says why one is too weak to take.

A token is judged in two steps.

1. **An upper bound on its entropy**: its length times the bits of one character of the
   smallest usual alphabet that holds it (digits 3.3, hex 4, base32 5, lowercase letters and
   digits 5.2, base64 or base64url 6, printable ASCII 6.6), not counting base64's ``=``
   padding or the hyphens of grouped hex. That is what drawing each character at random
   from that alphabet gives, and no generator of that alphabet gives more. A UUID counts
   122 bits, the random bits of a uuid4 (other versions have fewer), so it is refused:
   ``secrets.token_hex(16)`` (32 hex digits, 128 bits) and ``secrets.token_urlsafe(16)``
   (22 characters, 132 bits) are the shortest usual tokens that pass.
2. **No more regular than a random token**: the bound says nothing of how a token was
   made (34 zeros are 113 bits by it, ``0123456789abcdef`` twice is 128). A token is
   refused when a random one of its alphabet and length would show as much of one of
   these regularities with a chance under 2**-30 (bounded from above, so a truly random
   token is refused more rarely still):
   few different characters (``aaaa…``, ``abab…``); neighbours in sequence or equal
   (``abcd``, ``9876``, ``1111``); a stretch repeated (``x7Qp`` over and over, a token
   pasted twice).

A random token that happens to fit a smaller alphabet is judged by that one: a
``token_urlsafe(16)`` without capitals, ``-`` or ``_`` (about 3 in a million) falls to
lowercase-and-digits, 114 bits, and is refused; make another. Passphrases of dictionary
words are not recognised: make tokens with a random generator.
"""

from __future__ import annotations

import math
import re
import string

MIN_TOKEN_BITS = 128
#: How to make a token strong enough (named in the refusal of a weak one).
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
#: Longer tokens are refused outright (the regularity checks look at every pair of positions).
MAX_TOKEN_CHARS = 1024
#: A token more regular than a random one would be with a chance under 2**-SURPRISE_BITS is refused.
SURPRISE_BITS = 30.0
UUID_BITS = 122

# The usual token alphabets, smallest first: (what a refusal calls it, its characters).
_ALPHABETS = (
    ("decimal digits", string.digits),
    ("lowercase hex", string.digits + "abcdef"),
    ("uppercase hex", string.digits + "ABCDEF"),
    ("base32", string.ascii_uppercase + "234567"),
    ("lowercase letters and digits", string.ascii_lowercase + string.digits),
    ("base64", string.ascii_letters + string.digits + "-_+/"),  # either variant: 64 symbols used
)
_PRINTABLE = 94  # printable ASCII less the space; anything beyond ASCII is credited no more
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_GROUPED_HEX = re.compile(r"[0-9a-f]+(-[0-9a-f]+)+|[0-9A-F]+(-[0-9A-F]+)+")


def token_weakness(token: str) -> str | None:
    """Why ``token`` is too weak, as the middle of a refusal ("about 80 bits: …"), or None."""
    if len(token) > MAX_TOKEN_CHARS:
        return f"{len(token)} characters, over the {MAX_TOKEN_CHARS} a token may have"
    if _UUID.fullmatch(token):
        return f"a UUID holds at most {UUID_BITS} random bits"
    symbols = token.replace("-", "") if _GROUPED_HEX.fullmatch(token) else token.rstrip("=")
    name, size = _alphabet(symbols)
    bits = len(symbols) * math.log2(size)
    if bits < MIN_TOKEN_BITS:
        count = f"{len(symbols)} character{'s' if len(symbols) != 1 else ''}"
        return f"about {bits:.0f} bits: {count} of {name} ({size} symbols)"
    n = len(symbols)
    distinct = len(set(symbols))
    # Chance a random token uses at most `distinct` characters: pick them, then every character among them.
    if _log2_comb(size, distinct) + n * math.log2(distinct / size) < -SURPRISE_BITS:
        return f"it uses {distinct} different character(s) only, where a random token of its length would use more"
    # Each character next to one equal or adjacent in code (3 values at most) to the one before it.
    steps = sum(abs(ord(b) - ord(a)) <= 1 for a, b in zip(symbols, symbols[1:]))
    if _log2_comb(n - 1, steps) + steps * math.log2(min(1.0, 3 / size)) < -SURPRISE_BITS:
        return f"{steps} of its {n - 1} neighbouring characters run in sequence or repeat (like abcd or 1111)"
    # Each character equal to the one `shift` places before it, for the shift that finds most.
    for shift in range(1, n):
        same = sum(a == b for a, b in zip(symbols, symbols[shift:]))
        if math.log2(n - 1) + _log2_comb(n - shift, same) - same * math.log2(size) < -SURPRISE_BITS:
            return f"it repeats itself: {same} of its characters equal the one {shift} place(s) before them"
    return None


def _alphabet(symbols: str) -> tuple[str, int]:
    chars = set(symbols)
    for name, alphabet in _ALPHABETS:
        if chars <= set(alphabet):
            return name, len(alphabet)
    return "printable characters", _PRINTABLE


def _log2_comb(n: int, k: int) -> float:
    return math.log2(math.comb(n, k))
