"""The ledger's own cost of one durable append, at every ledger size: flat from 10k to 10M.

For each ``--sizes`` entry count, opens the ledger ``bench_service_scale.py`` built and cached
for it (``--cache``; built here the same way when missing) with ``DurableLedger.open(...,
verify="checkpoint")`` against its signed checkpoint (the check reads every row once; the
ledger keeps none of them after), then appends ``--appends`` single entries one after
another, each its own durable commit (chain hash, Merkle leaf and nodes, fsync'd WAL), and
prints per size:

* the latency of one append: median, p90, p99;
* the bytes each commit adds to the write-ahead log (the pages SQLite writes for it: the entry,
  the tree nodes a new leaf completes, the commit record) and the tree's height;
* the median's ratio to the smallest size's.

The service's ``/correct`` adds HTTP, the vote's index and the proofs to this (and at 10M, on a
23 GB machine, the page cache holds little of the file beside the service's memory:
``bench_service_scale.py`` measures that end to end). Each run appends ``--appends`` entries
to the cached files, as the service benchmark does.

Run: PYTHONPATH=src python benchmarks/bench_append_flat.py --cache DIR [--sizes 10000 1000000 10000000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service_scale import ORIGIN, build, load_average  # noqa: E402 - beside this script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, required=True, help="folder of bench_service_scale.py's cached ledgers")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000, 10_000_000])
    ap.add_argument("--appends", type=int, default=300, help="single-entry durable appends timed per size")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.appends < 1 or min(args.sizes) < 1:
        ap.error("--appends and every --sizes must be at least 1")

    from ocrr.ledger.heads import Signer
    from ocrr.ledger.sqlite.store import DurableLedger

    rng = np.random.default_rng([args.seed, 2])
    vecs = rng.normal(size=(args.appends, args.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    first_median = None
    print(f"bench_append_flat: {args.appends} single-entry durable appends per size ({load_average()})")
    for size in sorted(args.sizes):
        path = args.cache / f"ledger-{size}-{args.dim}-{args.classes}-{args.seed}.db"
        key = path.with_suffix(".pem")
        build(path, key, argparse.Namespace(**{**vars(args), "entries": size}))

        def keep_nothing(vecs, labels, texts, hashes: list[bytes]) -> bytes:
            return hashes[-1]  # (the rows are not kept: at 10M they would take 15 GB)

        t0 = time.perf_counter()
        with DurableLedger.open(path, verify="checkpoint", apply=keep_nothing, signer=Signer.load(key, ORIGIN)) as led:
            opened, wal = time.perf_counter() - t0, Path(f"{path}-wal")
            before, took = wal.stat().st_size if wal.exists() else 0, []
            for i in range(args.appends):
                t = time.perf_counter()
                led.extend(vecs[i : i + 1], ["c0"], [f"append {i}"])
                took.append(time.perf_counter() - t)
            grown = (wal.stat().st_size if wal.exists() else 0) - before
            entries, height = len(led), max(1, len(led) - 1).bit_length()
        ms = 1000 * np.asarray(took)
        median = float(np.median(ms))
        first_median = first_median or median
        wal_note = f"{grown / args.appends:,.0f} bytes of WAL per append" if grown > 0 else "WAL restarted meanwhile"
        print(
            f"{entries:>12,} entries (tree height {height}, opened in {opened:.1f} s): append median {median:.2f} ms, "
            f"p90 {np.percentile(ms, 90):.2f}, p99 {np.percentile(ms, 99):.2f}; {wal_note}; "
            f"median {median / first_median:.2f}x the smallest size's, target flat ({load_average()})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
