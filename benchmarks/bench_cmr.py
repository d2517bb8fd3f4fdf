"""Wall and CPU time of the CMR preset (`ocrr sweep --preset cmr`), and where they go.

Run: OCRR_DATA_DIR=/path/to/data python benchmarks/bench_cmr.py [--val-streams 4]
     [--test-streams 8] [--seeds-per-stream 3] [--jobs N] [--keep DIR] [--warm-fit-cache]

The defaults are the preset itself (search on 4 validation streams, then the test table on
8 streams x 3 seeds); fewer streams give a reduced grid with the same stages and systems.
It runs in this process, in a fresh folder, with a cold seed-state cache (a temporary
OCRR_CACHE_DIR sharing only the embeddings with the user cache) unless --warm-fit-cache.

Prints, in the same run:
* wall time, against its limit: the CPU-seconds of all runs divided by the workers (what
  the wall time would be if every worker were busy all along on an otherwise idle machine);
* CPU time: in runs (each worker's own count, from the sweeps' logs) and in this process
  (staging, saving each run, consolidating the tables, the figure);
* per stage: runs, wall, CPU in runs;
* per phase, the shares of the runs' time (fit, stream predictions, corrections,
  evaluations, the rest: scenario, set-up, collecting the output);
* per system: runs, mean and total CPU-seconds.
The load average is printed too: above the core count, other work shared the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--val-streams", type=int, default=4)
    ap.add_argument("--test-streams", type=int, default=8)
    ap.add_argument("--seeds-per-stream", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=None, help="workers (default: one per core)")
    ap.add_argument("--keep", type=Path, default=None, help="write the preset's folder here and keep it")
    ap.add_argument("--warm-fit-cache", action="store_true", help="reuse seed heads already in the user cache")
    args = ap.parse_args()

    from ocrr.engine.sweep import available_cores
    from ocrr.studies.cmr_preset import CmrPlan, run_cmr_preset
    from ocrr.utils.paths import cache_root

    if not os.environ.get("OCRR_DATA_DIR"):
        print("note: OCRR_DATA_DIR is not set; clinc150 must be in the cache.")
    cold = None
    if not args.warm_fit_cache:
        cold = Path(tempfile.mkdtemp(prefix="bench-cmr-cache-"))
        (cold / "embeddings").symlink_to(cache_root() / "embeddings", target_is_directory=True)
        os.environ["OCRR_CACHE_DIR"] = str(cold)
    out = args.keep or Path(tempfile.mkdtemp(prefix="bench-cmr-"))
    shutil.rmtree(out, ignore_errors=True)
    plan = CmrPlan(val_streams=args.val_streams, test_streams=args.test_streams, seeds_per_stream=args.seeds_per_stream)
    workers = args.jobs or available_cores()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        run_cmr_preset(plan, out, jobs=args.jobs, say=lambda *a: None)
        wall, parent_cpu = time.perf_counter() - t0, time.process_time() - c0
        report(out, wall, parent_cpu, workers, args)
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
        if cold is not None:
            shutil.rmtree(cold, ignore_errors=True)  # the symlink, not the embeddings


def report(out: Path, wall: float, parent_cpu: float, workers: int, args) -> None:
    stages = []
    done = []
    for stage in ("search", "test"):
        log = [json.loads(line) for line in (out / stage / "log.jsonl").read_text().splitlines() if line.strip()]
        runs = [r for r in log if r["event"] == "done"]
        done += runs
        # the search is several sweeps into one folder: one (start, end) pair each
        seconds = sum(r["seconds"] for r in log if r["event"] == "end")
        stages.append((stage, len(runs), seconds, sum(r["cpu_seconds"] for r in runs)))
    run_cpu = sum(r["cpu_seconds"] for r in done)
    run_wall = sum(r["seconds"] for r in done)
    limit = run_cpu / workers
    grid = f"{args.val_streams} validation streams, {args.test_streams} test streams x {args.seeds_per_stream} seeds"
    print(f"CMR preset ({grid}): {len(done)} runs on {workers} workers")
    print(
        f"  wall {wall:.1f} s = {wall / 60:.2f} min;  limit (CPU in runs / workers) {limit:.1f} s: {wall / limit:.2f}x"
    )
    print(
        f"  CPU {run_cpu + parent_cpu:.1f} s: {run_cpu:.1f} s in runs, {parent_cpu:.1f} s in this process "
        f"(staging, saving runs, tables, figure)"
    )
    print(f"  runs' CPU / wall {run_cpu / run_wall:.0%} (below 100 %: the cores were shared)")
    print(f"  load average now: {' '.join(open('/proc/loadavg').read().split()[:3])} on {os.cpu_count()} cores")
    print(f"  {'stage':8s} {'runs':>5s} {'wall s':>8s} {'CPU s':>8s}")
    for stage, n, seconds, cpu in stages:
        print(f"  {stage:8s} {n:5d} {seconds:8.1f} {cpu:8.1f}")

    phases = pd.concat([_last_timings(out / stage) for stage in ("search", "test")], ignore_index=True)
    total = sum(r["seconds"] for r in done)
    shares = {p: phases[f"{p}_seconds"].sum() for p in ("fit", "predict", "correct", "eval")}
    shares["rest"] = total - sum(shares.values())
    print("  phases (share of the runs' wall time): " + ", ".join(f"{p} {v / total:.0%}" for p, v in shares.items()))

    per_system = defaultdict(list)
    for r in done:
        per_system[r["system"].split(":")[0]].append(r["cpu_seconds"])
    print(f"  {'system':20s} {'runs':>5s} {'mean CPU s':>11s} {'total CPU s':>12s}")
    for system, cpus in sorted(per_system.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {system:20s} {len(cpus):5d} {sum(cpus) / len(cpus):11.2f} {sum(cpus):12.1f}")


def _last_timings(folder: Path) -> pd.DataFrame:
    """Each run's cumulative phase seconds at its last checkpoint."""
    timings = pd.read_csv(folder / "timings.csv")
    return timings.sort_values("step", kind="mergesort").groupby("task_id").tail(1)


if __name__ == "__main__":
    main()
