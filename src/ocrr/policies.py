"""Correction policies: after each prediction, does the user correct it?

Only wrong predictions are corrected, except under ``all`` (the online-learning setting of
EvalOCL), which reveals every item's label, right or wrong. A random policy with probability p draws
one uniform number per stream position from a generator derived from the run seed
alone, and corrects position i when the prediction is wrong and u_i < p. Every system
in a run therefore meets the same coins, and random10's coins are a subset of random50's.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from ocrr.errors import OcrrError

NAMED = {"oracle": 1.0, "random50": 0.5, "random10": 0.1}
NAMES = "oracle, all, random50, random10 or random:<p>"


@dataclass(frozen=True)
class Policy:
    name: str
    p: float
    reveals_right: bool = False  # `all`: right predictions are revealed (and learned from) too

    def coins(self, seed: int, n: int) -> np.ndarray:
        """Boolean per stream position: would a wrong prediction here be corrected?"""
        if self.p >= 1.0:
            return np.ones(n, bool)
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(b"correction-policy")]))
        return rng.random(n) < self.p


def make_policy(spec: str) -> Policy:
    """'oracle' | 'all' | 'random50' | 'random10' | 'random:<p>' (aliases: random_50, random-50)."""
    key = spec.strip().lower().replace("_", "").replace("-", "")
    if key == "all":
        return Policy("all", 1.0, reveals_right=True)
    if key in NAMED:
        return Policy(key, NAMED[key])
    if key.startswith("random:"):
        try:
            p = float(key.split(":", 1)[1])
        except ValueError:
            p = -1.0
        if 0.0 < p <= 1.0:
            return Policy(f"random:{p:g}", p)
        raise OcrrError(f"policy {spec!r}: the probability must be a number in (0, 1], e.g. random:0.25.")
    raise OcrrError(f"unknown policy {spec!r}. Use {NAMES}.")
