"""Per-correction and per-prediction cost of every registered system (paper section 5.7).

Setup, Banking77-sized: synthetic Gaussian clusters (ocrr.data.synthetic), 77 classes x 130
train items, 384-d unit vectors; 10 classes held out, so the seed set has 67 x 130 = 8710
items. Each system is fitted on the seed set, then streamed held-out items as the runner
does: predict one item, then correct it (every item is corrected: the oracle's worst
case), timing the two calls apart; means are over ``--calls`` items. "eval" is one
batched predict of 800 queries after the stream (as at a checkpoint), per query.
Text-level systems (lora) cannot run on embeddings-only data and are listed as skipped.
Timings are wall clock: on a shared machine, run it when the machine is quiet.

river systems are fitted on a 600-item subsample (``--river-subsample``) to keep this
under two minutes: their per-call cost depends on the number of classes and features,
not on how many seed items they saw.

Run: PYTHONPATH=src python benchmarks/bench_systems.py [--calls 100] [--systems a,b]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ocrr.data.synthetic import make_synthetic
from ocrr.errors import OcrrError
from ocrr.protocols import heldout_scenario
from ocrr.systems import REGISTRY, expand_systems, make_system
from ocrr.utils.threads import pin_threads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=100, help="stream items timed per system")
    ap.add_argument("--systems", default="all", help="comma list of system specs (default: all registered)")
    ap.add_argument("--river-subsample", type=int, default=600)
    args = ap.parse_args()
    pin_threads()

    ds = make_synthetic(n_classes=77, dim=384, n_train_per_class=130, n_test_per_class=40, sigma=0.12, seed=0)
    sc = heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=0, n_heldout=10, eval_cap=400)
    stream = sc.stream[: args.calls]
    evalset = sc.eval_sets["original"]
    novel = sc.eval_sets["novel"]
    queries = type(evalset)(np.concatenate([evalset.vecs, novel.vecs]))
    print(
        f"seed set {len(sc.seed_set)} x {ds.train.vecs.shape[1]}-d, {len(ds.labels)} classes; "
        f"{len(stream)} predict+correct calls per system; eval batch {len(queries)}\n"
    )

    rows, skipped = [], []
    for spec in expand_systems([args.systems]):
        name = spec.split(":")[0]
        if name.startswith("river") and "subsample=" not in spec:
            spec = f"{spec}:subsample={args.river_subsample}"
        system = make_system(spec, labels=sc.labels, seed=0)
        t0 = time.perf_counter()
        try:
            system.fit(sc.seed_set)
        except OcrrError as err:  # text-level systems (lora) cannot run on embeddings-only data
            skipped.append((spec, str(err).split(";")[0]))
            print(f"  {spec}: skipped", flush=True)
            continue
        fit_s = time.perf_counter() - t0
        system.predict(queries)  # warm any per-query-set cache, as the first checkpoint does
        t_pred = t_corr = 0.0
        for i in range(len(stream)):
            item = stream[i]
            t = time.perf_counter()
            system.predict(item)
            t_pred += time.perf_counter() - t
            t = time.perf_counter()
            system.correct(item)
            t_corr += time.perf_counter() - t
        t = time.perf_counter()
        system.predict(queries)
        t_eval = time.perf_counter() - t
        n = max(len(stream), 1)
        rows.append(
            (spec, REGISTRY[name].family, 1e6 * t_corr / n, 1e6 * t_pred / n, 1e6 * t_eval / len(queries), fit_s)
        )
        print(f"  {spec}: done", flush=True)

    print("\n| System | family | per-correction (µs) | per-prediction (µs) | eval (µs/query) | fit (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for spec, family, corr, pred, ev, fit in rows:
        print(f"| {spec} | {family} | {corr:,.0f} | {pred:,.0f} | {ev:,.1f} | {fit:.2f} |")
    for spec, why in skipped:
        print(f"\nskipped {spec}: {why}")


if __name__ == "__main__":
    main()
