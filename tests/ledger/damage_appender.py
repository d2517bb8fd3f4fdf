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


def damage_by_another_fails_the_next_append(led, other) -> None:
    """``other`` (another process's store of the same ledger) records verifications while
    ``led`` appends: a record of no damage lets the next append in, one of damage fails it
    (read inside the commit's transaction), and nothing is added over it."""
    appender = Appender(led)
    assert appender.append(0)[1] is None
    other.record_verification({"ok": True, "time": 1.0})
    assert appender.append(1)[1] is None  # a newer record, read in the transaction: no damage
    other.record_verification({"ok": False, "reason": "entry 2 edited", "time": 2.0})
    ids, err = appender.append(2)
    assert ids is None and "entry 2 edited" in str(err)
    assert len(led) == 6  # nothing was added over it
    assert led.damage_since(-1)[1]["reason"] == "entry 2 edited"  # outside a commit: read as before
