"""Wall time of the main job (Banking77, oracle, seeds 0 1 2, four systems), embeddings cached.

Target: under 5 s on a 2-core machine (`make run` the second time). Needs the Banking77 files
(OCRR_DATA_DIR or --data-dir); encodes once if the cache is empty, and does not count that.

Prints, for the whole command, the best of --repeat runs: wall time and the CPU seconds the
command's own process used (the runs themselves go to worker processes of multiprocessing's
fork server, which the command does not wait for, so their CPU is not counted), and beside
them, measured in the same run,
the start-up floor: a bare Python importing what the command must import (ocrr's run command,
torch for the linear systems). On a shared machine CPU seconds move less than wall time;
the load average is printed too.
Run: OCRR_DATA_DIR=../shared/data python benchmarks/bench_main_job.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

MAIN = [
    "run",
    "--dataset",
    "banking77",
    "--policy",
    "oracle",
    "--seeds",
    "0",
    "1",
    "2",
    "--systems",
    "substrate",
    "static_knn",
    "static_linear",
    "online_linear",
    "--quiet",
]
# What `ocrr run` of the main job cannot avoid importing (its workers, torch; the command itself, the rest).
FLOOR = "import ocrr.cli.run, ocrr.engine.sweep.executors, torch"


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs of the command; the best counts (default 3)")
    ap.add_argument("--keep", default=None, help="write the run folder here (to compare its tables)")
    args = ap.parse_args()
    ocrr = [sys.executable, "-m", "ocrr.cli"]
    subprocess.run([*ocrr, "embed", "--dataset", "banking77"], check=True, stdout=subprocess.DEVNULL)  # not timed
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or tmp
        runs, floors = [], []
        for _ in range(args.repeat):  # the command and its floor back to back, so they share conditions
            runs.append(timed([*ocrr, *MAIN, "--out", out]))
            floors.append(timed([sys.executable, "-c", FLOOR]))
    wall, cpu = min(w for w, _ in runs), min(c for _, c in runs)
    floor_wall, floor_cpu = min(w for w, _ in floors), min(c for _, c in floors)
    print("main job (banking77 · oracle · seeds 0 1 2 · 4 systems), embeddings cached, whole command:")
    print(
        f"  wall time   {wall:6.1f} s   (best of {len(runs)}: {', '.join(f'{w:.1f}' for w, _ in runs)})   target ≤ 5 s"
    )
    print(
        f"  CPU time    {cpu:6.1f} s   (best of {len(runs)}: {', '.join(f'{c:.1f}' for _, c in runs)}; "
        "the command's own process: the runs go to the workers of multiprocessing's fork server, which "
        "outlives it by a moment and is not counted)"
    )
    print(f"  limit: start-up imports alone {floor_wall:.1f} s wall, {floor_cpu:.1f} s CPU  ({FLOOR})")
    load = os.getloadavg()[0]
    print(f"  load average {load:.1f} on {os.cpu_count()} cores (above the core count: the machine was shared)")


if __name__ == "__main__":
    main()
