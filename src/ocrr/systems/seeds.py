"""Seeds for every random choice a system makes: the run's seed and a stable key, never Python's hash()."""

from __future__ import annotations

import zlib

import numpy as np


def derive_seed(seed: int, key: str) -> int:
    """A stable 63-bit seed from the run seed and a name (never Python's hash())."""
    ss = np.random.SeedSequence([int(seed), zlib.crc32(key.encode("utf-8"))])
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
