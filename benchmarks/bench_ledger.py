"""Timing of ocrr.ledger: append, extend, verify, save/load, file-backed append and reopening.

Run: PYTHONPATH=src python benchmarks/bench_ledger.py [--n 10000] [--dim 384]
Budget: append of a 384-d vector at 10k entries <= 20 µs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from ocrr.ledger import Ledger


def _best(fn, repeats: int) -> float:
    """Best wall time of ``repeats`` runs: the least noisy estimate on a shared box."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    n, dim, reps = args.n, args.dim, args.repeats

    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n + 1000, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # like encoder output
    labels = [f"intent_{i % 77}" for i in range(n + 1000)]
    texts = [f"utterance number {i}" for i in range(n + 1000)]
    rows = list(vecs)  # one (d,) float32 array per append, as an encoder hands them over

    def build() -> Ledger:
        led = Ledger()
        for i in range(n):
            led.append(rows[i], labels[i], texts[i])
        return led

    t_build = _best(build, reps)
    led = build()

    # Marginal cost at n entries: 1000 more appends onto a freshly built n-entry ledger.
    def tail() -> None:
        for i in range(n, n + 1000):
            led_tail.append(rows[i], labels[i], texts[i])

    t_tail = float("inf")
    for _ in range(reps):
        led_tail = build()
        t0 = time.perf_counter()
        tail()
        t_tail = min(t_tail, time.perf_counter() - t0)

    t_extend = _best(lambda: Ledger().extend(vecs[:n], labels[:n], texts[:n]), reps)
    t_verify = _best(lambda: led.verify(), reps)
    assert led.verify()

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.db"
        t_save = _best(lambda: led.save(path), reps)
        size_mb = path.stat().st_size / 1e6
        t_load_noverify = _best(lambda: Ledger.load(path, verify=False), reps)
        t_load = _best(lambda: Ledger.load(path), reps)
        assert Ledger.load(path).head == led.head

        def file_backed() -> None:
            p = Path(tmp) / "open.db"
            p.unlink(missing_ok=True)
            with Ledger.open(p) as fl:
                for i in range(n):
                    fl.append(rows[i], labels[i], texts[i])

        t_open = _best(file_backed, max(1, reps // 2))

        def reopen() -> None:
            Ledger.open(Path(tmp) / "open.db").close()

        t_reopen = _best(reopen, reps)

    lines = [
        (f"append, mean while building {n} entries", f"{t_build / n * 1e6:7.2f} µs/append  (includes buffer growth)"),
        (f"append, entries {n}..{n + 1000}", f"{t_tail / 1000 * 1e6:7.2f} µs/append  (budget 20 µs)"),
        (f"extend {n} in one call", f"{t_extend / n * 1e6:7.2f} µs/entry   ({t_extend * 1e3:.1f} ms)"),
        (f"verify {n} entries", f"{t_verify * 1e3:7.1f} ms         ({t_verify / n * 1e6:.2f} µs/entry)"),
        (f"save {n} entries ({size_mb:.1f} MB file)", f"{t_save * 1e3:7.1f} ms"),
        (f"load {n} entries, verify=False", f"{t_load_noverify * 1e3:7.1f} ms"),
        (f"load {n} entries, verify=True", f"{t_load * 1e3:7.1f} ms"),
        ("file-backed append (Ledger.open)", f"{t_open / n * 1e6:7.2f} µs/append  (one flush at close)"),
        (f"Ledger.open of that {n}-entry file", f"{t_reopen * 1e3:7.1f} ms         (every entry checked)"),
    ]
    print(f"ocrr.ledger benchmark: n={n}, dim={dim}, best of {reps}")
    for name, value in lines:
        print(f"  {name:<42s}{value}")


if __name__ == "__main__":
    main()
