"""Substrate costs at 10k ledger entries (paper section 5.7 targets).

Prints: `correct` µs per item (with SHA-256 hashing), single `predict` µs, and one full
evaluation of 800 queries against 10k entries (cold: a fresh query set; warm: the same
set after 50 appends, as the runner's checkpoints do). Run: python benchmarks/bench_substrate.py
"""

from __future__ import annotations

import time

import numpy as np

from ocrr.systems import Batch, make_system
from ocrr.utils.threads import pin_threads

DIM, N, CLASSES = 384, 10_000, 77


def unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def main() -> None:
    pin_threads()
    rng = np.random.default_rng(0)
    labels = [f"c{i:02d}" for i in rng.integers(0, CLASSES, N)]
    sub = make_system("substrate").fit(Batch(unit(rng, N), [f"t{i}" for i in range(N)], labels))

    extra = unit(rng, 2000)
    t = time.perf_counter()
    for i in range(2000):
        sub.correct(Batch(extra[i : i + 1], [f"x{i}"], ["c00"]))
    correct_us = (time.perf_counter() - t) / 2000 * 1e6

    queries = unit(rng, 1000)
    for i in range(20):
        sub.predict(Batch(queries[i : i + 1]))
    t = time.perf_counter()
    for i in range(1000):
        sub.predict(Batch(queries[i : i + 1]))
    predict_us = (time.perf_counter() - t) / 1000 * 1e6

    evalset = Batch(unit(rng, 800))
    t = time.perf_counter()
    sub.predict(evalset)
    cold_ms = (time.perf_counter() - t) * 1e3
    sub.correct(Batch(unit(rng, 50), None, ["c01"] * 50))
    t = time.perf_counter()
    sub.predict(evalset)
    warm_ms = (time.perf_counter() - t) * 1e3

    print(f"substrate at {N:,} entries, d={DIM}")
    print(f"  correct (append + SHA-256)          {correct_us:8.1f} µs/item   (target ≤ 20)")
    print(f"  predict, one query                  {predict_us:8.1f} µs")
    print(f"  evaluate 800 queries, cold          {cold_ms:8.1f} ms        (target ≤ 50)")
    print(f"  evaluate 800 queries, after 50 adds {warm_ms:8.1f} ms        (incremental)")


if __name__ == "__main__":
    main()
