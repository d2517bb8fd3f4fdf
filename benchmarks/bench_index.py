"""Query speed (and recall) of the search backends: exact (numpy) vs HNSW and IVF (FAISS), optionally sq8.

Run: PYTHONPATH=src python benchmarks/bench_index.py [--sizes 10000,100000,1000000]
     [--kinds exact,hnsw,ivf_pq] [--dim 384] [--queries 200] [--threads 1] [--ef-search 64]
     [--sigma 0.3] [--family gaussian|subspace] [--target-recall 0.95]

Data: the scale study's synthetic stream (100 classes, unit vectors, noise --sigma per
dimension), added class by class in chunks of 65 536 as a growing ledger would; fresh
queries (2 per class). For each size, kind (and efSearch, for HNSW kinds; give a comma
list to see the recall/latency trade-off) it prints the build time, ms/query and
queries/s for one query per call on one thread ("single": thread CPU time, so other
processes on a shared box do not inflate it; the wall time is printed too) and for one
call with all queries ("batched", wall time on --threads threads), recall@5 against
exact search, the substrate vote's accuracy, and the index's own bytes per entry.
Best of 3 passes each. Exact reads a borrowed buffer (no copy), as the unbounded
substrate does. HNSW build at 1M entries takes 15-45 minutes on two shared cores.
IVF kinds (ivf, ivf_sq8, ivf_pq) are built as ``rebuild_index`` builds them once the
stream is in: k-means on an even spread of it, every entry added, nprobe and re-rank
depth tuned for --target-recall (shown in the ef column as nprobe/rerank); their
re-rank reads the same buffer exact search reads.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--kinds", default="exact,hnsw", help="any of exact,hnsw,exact_sq8,hnsw_sq8,ivf,ivf_sq8,ivf_pq")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--sigma", type=float, default=0.3)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="FAISS/BLAS threads for build and batched search")
    ap.add_argument("--ef-search", default="64", help="efSearch value(s) for HNSW kinds, e.g. 16,64,256")
    ap.add_argument("--family", choices=("gaussian", "subspace"), default="gaussian")
    ap.add_argument("--intrinsic-dim", type=int, default=16, help="subspace family: its dimension")
    ap.add_argument("--target-recall", type=float, default=0.95, help="IVF kinds: tuned for this recall@5")
    args = ap.parse_args()

    import faiss
    from threadpoolctl import threadpool_limits

    from ocrr.index import ExactIndex, exact_search, make_index, recall_at_k
    from ocrr.index.vote import VoteRule
    from ocrr.studies.scale.data import make_stream
    from ocrr.studies.scale.study import _predict, _time_queries

    faiss.omp_set_num_threads(args.threads)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    efs = [int(e) for e in args.ef_search.split(",")]
    print(
        f"dim={args.dim} sigma={args.sigma} family={args.family} queries={args.queries} threads={args.threads} "
        f"faiss={faiss.__version__}"
    )
    print(
        f"{'N':>9} {'kind':>10} {'ef':>9} {'build s':>8} {'single ms/q':>12} {'single q/s':>11} {'wall ms/q':>10} "
        f"{'batched ms/q':>13} {'batched q/s':>12} {'recall@5':>9} {'vote acc':>9} {'B/entry':>8}"
    )
    with threadpool_limits(args.threads):
        for n in (int(float(s)) for s in args.sizes.split(",")):
            stream = make_stream(args.family, n, 100, args.dim, args.sigma, 0, args.intrinsic_dim)
            queries, labels = stream.fresh_queries(args.queries)
            store = np.empty((n, args.dim), np.float32)  # the ledger's buffer: ground truth, and exact reads it
            indexes, build = {}, {}
            for kind in kinds:
                if kind == "exact":
                    indexes[kind] = ExactIndex(args.dim, source=lambda store=store: store)
                elif kind.startswith("ivf"):
                    indexes[kind] = make_index(
                        kind, args.dim, source=lambda store=store: store, target_recall=args.target_recall
                    )
                else:
                    indexes[kind] = make_index(kind, args.dim)
                build[kind] = 0.0
            for first, x in stream.chunks():
                ids = np.arange(first, first + len(x))
                store[first : first + len(x)] = x
                for kind, index in indexes.items():
                    if kind.startswith("ivf"):
                        continue  # built once the stream is in (below)
                    t0 = time.perf_counter()
                    if getattr(index, "compressed", False) and first == 0:
                        index.train(x)
                    index.add(x, ids)
                    build[kind] += time.perf_counter() - t0
            for kind, index in indexes.items():
                if kind.startswith("ivf"):
                    t0 = time.perf_counter()
                    index.build(store, np.arange(n))
                    build[kind] = time.perf_counter() - t0
            _, truth = exact_search(store, queries, 5)
            for kind, index in indexes.items():
                for ef in efs if kind.startswith("hnsw") else [None]:
                    if ef is not None:
                        index.ef_search = ef
                    t = _time_queries(index, queries, 5, args.threads)
                    sims, ids = index.search(queries, 5)
                    acc = float(np.mean(_predict(stream, sims, ids, VoteRule()) == labels))
                    single, batched = t["ms_per_query"], t["ms_per_query_batched"]
                    if kind.startswith("ivf"):
                        ef = f"{index.nprobe}/{index.rerank}"
                    print(
                        f"{n:>9} {kind:>10} {ef or '':>9} {build[kind]:>8.1f} {single:>12.3f} {1000 / single:>11.0f} "
                        f"{t['ms_per_query_wall']:>10.3f} {batched:>13.3f} {1000 / batched:>12.0f} "
                        f"{recall_at_k(ids, truth):>9.3f} {acc:>9.3f} {index.nbytes / n:>8.0f}",
                        flush=True,
                    )
            del indexes, store


if __name__ == "__main__":
    main()
