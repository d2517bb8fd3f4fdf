"""Wall time of `ocrr sweep` for the paper's presets, with embeddings already cached.

Run: OCRR_DATA_DIR=/path/to/data python benchmarks/bench_sweep.py [--presets main storage]
     [--jobs N] [--executor local|ray] [--extra --seeds 0 ...]
Goals on a 2-core machine: --preset main (180 runs: the paper's 162 and 18 of the
consolidating memory) within 90 s; --preset cmr (the CMR search on 4 validation streams,
then the test table on 8 streams x 3 seeds) within 8 minutes (benchmarks/bench_cmr.py
breaks the CMR preset down by stage, phase and system).

Encoding is done first (`ocrr embed`, cached) and not counted. Each preset runs in a fresh
folder, so nothing is skipped, and with a cold seed-state cache (systems/fit_cache.py): the
sweep runs under a temporary OCRR_CACHE_DIR that shares only the embeddings with the user
cache (--warm-fit-cache uses the user cache as it is). Prints the wall time, runs per minute, and the mean seconds
per run of each system (from the sweep's execution log) so slow systems stand out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

GOAL_S = {"main": 90.0, "cmr": 480.0}  # on a 2-core machine
DATASETS = {
    "main": ["banking77", "clinc150"],
    "storage": ["banking77"],
    "ablation": ["banking77"],
    "smoke": [],
    "cmr": ["clinc150"],
    "cmr_table2": ["clinc150"],
}


def ocrr(*args: str) -> list[str]:
    return [sys.executable, "-m", "ocrr.cli", *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["main", "storage"])
    ap.add_argument("--executor", default="local")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep the sweep folders under this folder")
    ap.add_argument(
        "--extra",
        nargs=argparse.REMAINDER,
        default=[],
        help="more `ocrr sweep` options, e.g. --extra --seeds 0 (a reduced grid)",
    )
    ap.add_argument(
        "--warm-fit-cache", action="store_true", help="reuse seed states (river seed models) already in the user cache"
    )
    args = ap.parse_args()
    if not os.environ.get("OCRR_DATA_DIR") and any(DATASETS.get(p) for p in args.presets):
        print("note: OCRR_DATA_DIR is not set; banking77/clinc150 must be in the cache or downloadable.")

    for dataset in sorted({d for p in args.presets for d in DATASETS.get(p, [])}):
        t0 = time.perf_counter()
        subprocess.run(ocrr("embed", "--dataset", dataset), check=True, stdout=subprocess.DEVNULL)
        print(f"embeddings of {dataset} ready ({time.perf_counter() - t0:.1f} s, not counted)")

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    env = dict(os.environ)
    if not args.warm_fit_cache:
        from ocrr.utils.paths import cache_root

        cold = Path(tempfile.mkdtemp(prefix="bench-sweep-cache-"))
        (cold / "embeddings").symlink_to(cache_root() / "embeddings", target_is_directory=True)
        env["OCRR_CACHE_DIR"] = str(cold)
        print(f"seed-state cache: cold ({cold}; embeddings shared with the user cache)")
    try:
        for preset in args.presets:
            out = root / f"sweep-{preset}"
            shutil.rmtree(out, ignore_errors=True)
            cmd = ocrr(
                "sweep",
                "--preset",
                preset,
                "--out",
                str(out),
                "--executor",
                args.executor,
                "--quiet",
                *(["--jobs", str(args.jobs)] if args.jobs else []),
                *args.extra,
            )
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"{preset}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
                continue
            # staged presets (cmr) keep one sweep folder per stage, each with its log
            log = [
                json.loads(line) for path in sorted(out.rglob("log.jsonl")) for line in path.read_text().splitlines()
            ]
            done = [r for r in log if r["event"] == "done"]
            start = next(r for r in log if r["event"] == "start")
            goal = GOAL_S.get(preset)
            verdict = (
                ""
                if goal is None or args.extra
                else (f"  [{'within' if wall <= goal else 'OVER'} the goal of {goal:.0f} s]")
            )
            print(
                f"\nsweep --preset {preset} {' '.join(args.extra)}: {len(done)} runs on {start['workers']} "
                f"{args.executor} workers in {wall:.1f} s wall ({60 * len(done) / wall:.1f} runs/min){verdict}"
            )
            print(
                f"  load average at the end: {open('/proc/loadavg').read().split()[0]} (above the core count: "
                "other work shared the machine)"
            )
            per_system = defaultdict(list)
            for r in done:
                per_system[r["system"]].append((r["seconds"], r.get("cpu_seconds", float("nan"))))
            busy = sum(w for v in per_system.values() for w, _ in v)
            cpu = sum(c for v in per_system.values() for _, c in v)
            print(
                f"  in runs: {busy:.1f} worker-seconds wall, {cpu:.1f} CPU-seconds "
                f"(CPU/wall {cpu / busy:.0%}: below 100 % means the cores were shared)"
            )
            print(
                f"  CPU-bound estimate for a quiet box: {cpu / start['workers'] / 60:.1f} min "
                f"(CPU-seconds in runs / {start['workers']} workers; stage tails and start-up not counted)"
            )
            print(f"  {'system':28s} runs   mean wall   mean CPU   total CPU")
            for system, secs in sorted(per_system.items(), key=lambda kv: -sum(c for _, c in kv[1])):
                walls, cpus = [w for w, _ in secs], [c for _, c in secs]
                print(
                    f"  {system:28s} {len(secs):4d} {sum(walls) / len(walls):9.2f} s {sum(cpus) / len(cpus):8.2f} s "
                    f"{sum(cpus):9.1f} s"
                )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
        if not args.warm_fit_cache:
            shutil.rmtree(env["OCRR_CACHE_DIR"], ignore_errors=True)  # the symlink, not the embeddings


if __name__ == "__main__":
    main()
