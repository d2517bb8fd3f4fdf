"""Wall time of the main job (Banking77, oracle, seeds 0 1 2, four systems), embeddings cached.

Target: under 30 s on a 2-core machine. Needs the Banking77 files (OCRR_DATA_DIR or
--data-dir); encodes once if the cache is empty, and does not count that.
Run: OCRR_DATA_DIR=../shared/data python benchmarks/bench_main_job.py
"""

from __future__ import annotations

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


def ocrr(*args: str) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ocrr.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ocrr("embed", "--dataset", "banking77")  # fill the cache; not timed
    with tempfile.TemporaryDirectory() as out:
        times = [ocrr(*MAIN, "--out", out) for _ in range(2)]
    print("main job (banking77 · oracle · seeds 0 1 2 · 4 systems), embeddings cached, whole command:")
    print(
        f"  wall time   {min(times):6.1f} s  (best of {len(times)}; runs {', '.join(f'{t:.1f}' for t in times)})"
        "   target < 30 s"
    )


if __name__ == "__main__":
    main()
