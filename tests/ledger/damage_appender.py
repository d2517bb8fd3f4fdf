"""An appender that submits as the service does: each append first checks for damage recorded
since its last look (shared by the SQLite and PostgreSQL damage-check tests)."""

from __future__ import annotations

import threading

import numpy as np

from ocrr.errors import OcrrError

DIM = 8


def rows(n: int, seed: int):
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True), [f"label {i}" for i in range(n)], [None] * n


class Appender:
    """Submits like the service: each append checked first for damage recorded since the last look."""

    def __init__(self, led):
        self.led, self.seen = led, -1

    def check(self) -> None:
        found = self.led.damage_since(self.seen)
        assert found is not None
        self.seen, bad = found
        if bad is not None:
            raise OcrrError(f"the ledger was found damaged: {bad['reason']}")

    def append(self, seed: int):
        outcome: list = []
        done = threading.Event()

        def tell(ids, err):
            outcome.extend((ids, err))
            done.set()

        self.led.submit(*rows(3, seed), tell, self.check)
        assert done.wait(30)
        return outcome
