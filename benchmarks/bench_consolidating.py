"""Per-correction cost of the consolidating memory against the substrate's, with the
consolidation time kept apart (corrections stay at ledger-append cost).

Setup as bench_systems.py (Banking77-sized synthetic clusters: 77 classes, 384-d, a seed set
of 8,710 items; 10 held-out classes streamed). Each system predicts, then is corrected on,
every one of ``--calls`` stream items. A correct() call that consolidated (the system's
``consolidations_`` count rose) is timed apart: "append" is the mean of the other calls,
"consolidation" the mean and the total of those (for ``consolidating_bg``, whose re-fits run
on a background thread, those are the hand-over calls: the time they waited for a re-fit to
finish, plus starting the next). Wall clock: run it on a quiet machine.

Run: PYTHONPATH=src python benchmarks/bench_consolidating.py [--calls 300] [--systems a,b]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ocrr.data.synthetic import make_synthetic
from ocrr.protocols import heldout_scenario
from ocrr.systems import make_system
from ocrr.utils.threads import pin_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=300, help="stream items predicted and corrected per system")
    ap.add_argument("--systems", default="substrate,consolidating,consolidating_bg,consolidating_r50,mbpa")
    args = ap.parse_args()
    pin_threads()
    ds = make_synthetic(n_classes=77, dim=384, n_train_per_class=130, n_test_per_class=40, sigma=0.12, seed=0)
    sc = heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=0, n_heldout=10, eval_cap=400)
    stream = sc.stream[: args.calls]
    print(f"seed set {len(sc.seed_set)}, {len(stream)} predict+correct calls per system\n")
    print(
        "| system | append (µs per correction) | vs substrate | consolidations | consolidation (ms each) "
        "| consolidation total (s) | predict (µs) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = None
    for spec in args.systems.split(","):
        system = make_system(spec, labels=sc.labels, seed=0).fit(sc.seed_set)
        plain, consolidating, predict = [], [], []
        for i in range(len(stream)):
            item = stream[i]
            t = time.perf_counter()
            system.predict(item)
            predict.append(time.perf_counter() - t)
            before = getattr(system, "consolidations_", 0)
            t = time.perf_counter()
            system.correct(item)
            took = time.perf_counter() - t
            (consolidating if getattr(system, "consolidations_", 0) > before else plain).append(took)
        append = 1e6 * float(np.mean(plain))
        base = append if base is None else base
        each = 1e3 * float(np.mean(consolidating)) if consolidating else 0.0
        print(
            f"| {spec} | {append:,.0f} | {append / base:.2f}x | {len(consolidating)} | {each:,.1f} | "
            f"{sum(consolidating):.2f} | {1e6 * float(np.mean(predict)):,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
