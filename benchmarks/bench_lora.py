"""Cost of `lora` next to online_linear and the substrate on the same data (paper 5.7).

On Banking77's seed-0 scenario (held-out classes, embeddings cached): for each system,
per-correction cost (one corrected stream item at a time, as the runner sends them),
one-item predict cost and one checkpoint evaluation (the ~800 original + novel test
queries). A correction's cost depends on the model's shapes, not on what it has
learned, so `lora` is fitted with 0 seed epochs here; its seed phase is timed on a
sample of seed texts and extrapolated to the full 2 epochs.

With ``--timings results/x/timings.csv`` it also prints each run's wall time (fit,
stream predictions, corrections, evaluations) and the measured per-correction cost
from an ``ocrr run``. Threads are pinned as the runner pins them (1).

Run: OCRR_DATA_DIR=<folder holding banking77/> python benchmarks/bench_lora.py [--timings PATH] [--corrections N]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ocrr.data import load_dataset
from ocrr.encoders import embed_dataset
from ocrr.protocols import heldout_scenario
from ocrr.systems import make_system
from ocrr.utils.threads import pin_threads

SYSTEMS = ["substrate", "online_linear", "lora:progress=false:seed_epochs=0"]


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:8.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:8.2f} ms"


def measure(spec: str, scenario, n_corrections: int, n_predicts: int) -> dict:
    system = make_system(spec, labels=scenario.labels, seed=0)
    t = time.perf_counter()
    system.fit(scenario.seed_set)
    fit_s = time.perf_counter() - t
    stream = scenario.stream
    for i in range(min(3, len(stream))):  # warm-up: first calls allocate
        system.predict(stream[i])
    t = time.perf_counter()
    for i in range(n_predicts):
        system.predict(stream[i])
    predict_s = (time.perf_counter() - t) / n_predicts
    t = time.perf_counter()
    for i in range(n_corrections):
        system.correct(stream[i])
    correct_s = (time.perf_counter() - t) / n_corrections
    n_eval = sum(len(b) for b in scenario.eval_sets.values())
    t = time.perf_counter()
    for batch in scenario.eval_sets.values():
        system.predict(batch)
    eval_s = time.perf_counter() - t
    return {
        "system": spec.split(":")[0],
        "fit": fit_s,
        "predict": predict_s,
        "correct": correct_s,
        "eval": eval_s,
        "n_eval": n_eval,
    }


def seed_phase_estimate(scenario, n_texts: int) -> tuple[float, float]:
    """Seconds per seed text per epoch on a sample, and the full seed phase extrapolated."""
    seed = scenario.seed_set
    idx = np.random.default_rng(0).choice(len(seed), size=min(n_texts, len(seed)), replace=False)
    sample = seed[np.sort(idx)]
    base = make_system("lora:progress=false:seed_epochs=0", labels=scenario.labels, seed=0)
    t = time.perf_counter()
    base.fit(sample)
    load_s = time.perf_counter() - t
    one = make_system("lora:progress=false:seed_epochs=1", labels=scenario.labels, seed=0)
    t = time.perf_counter()
    one.fit(sample)
    per_text = max(time.perf_counter() - t - load_s, 0.0) / len(sample)
    return per_text, load_s + per_text * len(seed) * make_system("lora").seed_epochs


def print_timings(path: Path) -> None:
    df = pd.read_csv(path)
    last = df.sort_values("step").groupby(["seed", "system"], sort=False).tail(1)
    cols = ["fit_seconds", "predict_seconds", "correct_seconds", "eval_seconds"]
    last = last.assign(
        total=last[cols].sum(axis=1), per_correction=last["correct_seconds"] / last["corrections"].clip(lower=1)
    )
    print(f"\nrun wall time from {path} (seconds; total = fit + stream predict + corrections + evaluations)")
    print(
        f"  {'system':<16}{'seed':>5}{'fit':>9}{'predict':>9}{'correct':>9}{'eval':>9}{'total':>9}"
        f"{'corrections':>13}{'per correction':>17}"
    )
    for row in last.sort_values(["system", "seed"]).itertuples():
        print(
            f"  {row.system:<16}{row.seed:>5}{row.fit_seconds:9.1f}{row.predict_seconds:9.1f}"
            f"{row.correct_seconds:9.1f}{row.eval_seconds:9.1f}{row.total:9.1f}{row.corrections:13d}"
            f"{fmt(row.per_correction):>17}"
        )
    print(f"  all runs: {last['total'].sum():.0f} s ({last['total'].sum() / 60:.1f} min)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timings", type=Path, default=None, help="timings.csv of an `ocrr run` to summarise")
    parser.add_argument("--corrections", type=int, default=50, help="corrections timed per system (default 50)")
    parser.add_argument("--seed-sample", type=int, default=256, help="seed texts timed for the lora seed phase")
    parser.add_argument("--data-dir", default=None, help="Banking77 folder (else $OCRR_DATA_DIR or the cache)")
    args = parser.parse_args()
    pin_threads()
    dataset = load_dataset("banking77", data_dir=args.data_dir)
    emb = embed_dataset(dataset, "minilm")
    scenario = heldout_scenario(dataset, emb.train, emb.test, 0)
    n_predicts = min(args.corrections, len(scenario.stream))
    rows = [measure(spec, scenario, min(args.corrections, len(scenario.stream)), n_predicts) for spec in SYSTEMS]
    n_eval = rows[0]["n_eval"]
    print(
        f"banking77 seed 0: {len(scenario.seed_set)} seed items, {len(scenario.stream)} stream items, "
        f"{n_eval} eval queries; torch threads 1"
    )
    print(f"  {'system':<16}{'correct (per item)':>20}{'predict (one item)':>20}{'evaluate ' + str(n_eval):>16}")
    for r in rows:
        print(f"  {r['system']:<16}{fmt(r['correct']):>20}{fmt(r['predict']):>20}{fmt(r['eval']):>16}")
    lin = next(r for r in rows if r["system"] == "online_linear")
    lora = next(r for r in rows if r["system"] == "lora")
    print(f"  lora / online_linear per correction: {lora['correct'] / lin['correct']:.0f}x")
    per_text, full = seed_phase_estimate(scenario, args.seed_sample)
    print(
        f"  lora seed phase: {per_text * 1e3:.1f} ms per text per epoch -> about {full / 60:.1f} min "
        f"for 2 epochs over {len(scenario.seed_set)} texts (model load included)"
    )
    if args.timings is not None:
        print_timings(args.timings)


if __name__ == "__main__":
    main()
