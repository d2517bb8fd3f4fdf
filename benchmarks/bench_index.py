"""Query speed of the search backends: exact (numpy) vs HNSW (FAISS), and optionally sq8.

Run: PYTHONPATH=src python benchmarks/bench_index.py [--sizes 10000,100000,1000000]
     [--kinds exact,hnsw] [--dim 384] [--queries 200] [--threads 1]

Data: the scale study's synthetic stream (100 classes, sigma 0.3, unit vectors), added
class by class in chunks of 65 536 as a growing ledger would. For each size and kind it
prints the build time, ms/query and queries/s for one query per call on one thread
("single": thread CPU time, so other processes on a shared box do not inflate it; the
wall time is printed too) and for one call with all queries ("batched", wall time on
--threads threads), and the index's own bytes per entry. Best of 3 passes each. Exact reads a
borrowed buffer (no copy), as the unbounded substrate does. HNSW build at 1M entries
takes tens of minutes on two shared cores (efConstruction=200).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--kinds", default="exact,hnsw", help="any of exact,hnsw,exact_sq8,hnsw_sq8")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="FAISS/BLAS threads for build and batched search")
    ap.add_argument("--ef-search", type=int, default=64)
    args = ap.parse_args()

    import faiss
    from threadpoolctl import threadpool_limits

    from ocrr.index import ExactIndex, make_index
    from ocrr.scale import SyntheticStream, _time_queries

    faiss.omp_set_num_threads(args.threads)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    print(f"dim={args.dim} queries={args.queries} threads={args.threads} faiss={faiss.__version__}")
    print(f"{'N':>9} {'kind':>10} {'build s':>9} {'single ms/q':>12} {'single q/s':>11} {'wall ms/q':>10} "
          f"{'batched ms/q':>13} {'batched q/s':>12} {'B/entry':>8}")
    with threadpool_limits(args.threads):
        for n in (int(float(s)) for s in args.sizes.split(",")):
            stream = SyntheticStream(n, 100, args.dim, 0.3, seed=0)
            queries, _ = stream.fresh_queries(args.queries)
            store = np.empty((n, args.dim), np.float32) if "exact" in kinds else None
            indexes, build = {}, {}
            for kind in kinds:
                indexes[kind] = (ExactIndex(args.dim, source=lambda: store) if kind == "exact"
                                 else make_index(kind, args.dim, ef_search=args.ef_search))
                build[kind] = 0.0
            for first, x in stream.chunks():
                ids = np.arange(first, first + len(x))
                if store is not None:
                    store[first : first + len(x)] = x
                for kind, index in indexes.items():
                    t0 = time.perf_counter()
                    if getattr(index, "compressed", False) and first == 0:
                        index.train(x)
                    index.add(x, ids)
                    build[kind] += time.perf_counter() - t0
            for kind, index in indexes.items():
                t = _time_queries(index, queries, 5, args.threads)
                single, batched = t["ms_per_query"], t["ms_per_query_batched"]
                print(f"{n:>9} {kind:>10} {build[kind]:>9.1f} {single:>12.3f} {1000 / single:>11.0f} "
                      f"{t['ms_per_query_wall']:>10.3f} {batched:>13.3f} {1000 / batched:>12.0f} "
                      f"{index.nbytes / n:>8.0f}", flush=True)
            del indexes, store


if __name__ == "__main__":
    main()
