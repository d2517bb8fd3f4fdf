"""A whole substrate (ledger + index + vote) at millions of entries, and the memory it holds.

Run: python benchmarks/bench_substrate_scale.py [--n 10000000] [--index exact_sq8]
     [--vectors-on-disk /tmp] [--sigma 0.1] [--queries 200] [--no-verify]
     [--index ivf_pq --target-recall 0.95]

Streams the scale study's synthetic class-incremental entries (ocrr.studies.scale.study.SyntheticStream:
100 classes, dim 384) into ``Substrate(index=..., vectors_on_disk=...)`` -- fit on the
first chunk, ``correct`` with the rest in 65,536-entry batches, every entry hashed into
the chain -- then prints:

* build: entries/s through ``correct`` (SHA-256 chain + index add); for an IVF index,
  also the maintenance step ``rebuild_index()`` that retrains its k-means on the whole
  ledger once it has outgrown the first entries it was trained on (``needs_retrain``),
  and the nprobe / re-rank depth tuned for --target-recall;
* memory from /proc/self/status: anonymous resident memory (what must fit in RAM: the
  ledger's per-entry metadata, the index, label codes) and file-backed resident memory
  (pages of the memory-mapped vector file: page cache the kernel reclaims under
  pressure), at the end and at peak (VmHWM);
* predict: accuracy on fresh queries (new draws of the classes) and ms per query, one
  query per call on one thread and one batched call;
* verify: seconds to re-hash the whole chain (reads every vector back from the file).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from ocrr.studies.scale.study import SyntheticStream
from ocrr.systems import Batch, make_system


def proc_status() -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process, in GB."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024 / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--index", default="exact_sq8", help="substrate index kind (exact_sq8, hnsw_sq8, exact, ...)")
    ap.add_argument(
        "--vectors-on-disk",
        default=tempfile.gettempdir(),
        help="folder for the ledger's memory-mapped vector file ('' keeps vectors in RAM)",
    )
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--target-recall", type=float, default=0.95, help="IVF indexes: tune for this recall@5")
    args = ap.parse_args()

    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(args.threads)
    threadpool_limits(args.threads)
    stream = SyntheticStream(args.n, 100, 384, args.sigma, seed=0)
    names = np.array([f"c{c:03d}" for c in range(100)])
    spec = f"substrate:index={args.index}:store_text=false"
    if args.index.startswith("ivf") or args.index.startswith("auto"):
        spec += f":target_recall={args.target_recall}"
    if args.vectors_on_disk:
        spec += f":vectors_on_disk={args.vectors_on_disk}"
    sub = None
    t0 = time.perf_counter()
    for first, x in stream.chunks():
        batch = Batch(x, None, names[stream.labels_of(np.arange(first, first + len(x)))].tolist())
        if sub is None:
            sub = make_system(spec).fit(batch)
        else:
            sub.correct(batch)
    build = time.perf_counter() - t0
    index = getattr(sub.index_, "backend", sub.index_)
    if getattr(index, "needs_retrain", False):
        t = time.perf_counter()
        sub.rebuild_index()
        index = getattr(sub.index_, "backend", sub.index_)
        print(
            f"rebuild_index (the IVF maintenance step: k-means over the whole ledger, then tuning): "
            f"{time.perf_counter() - t:.0f} s; nlist {index.nlist}, nprobe {index.nprobe}, rerank {index.rerank}, "
            f"tuned recall@5 {index.tuning['recall']:.3f}"
            if index.tuning
            else ""
        )
    mem = proc_status()
    print(
        f"substrate {spec}: {args.n:,} entries in {build:.0f} s ({args.n / build:,.0f} entries/s, "
        f"SHA-256 chain + {args.index} add)"
    )
    print(
        f"  memory: anonymous {mem['RssAnon']:.2f} GB (must fit in RAM), file-backed {mem['RssFile']:.2f} GB "
        f"(mapped vector pages: reclaimable page cache); peak RSS {mem['VmHWM']:.2f} GB"
    )
    fp = sub.footprint()
    print(
        f"  footprint: {fp.bytes / args.n:.0f} B/entry counted by the substrate "
        f"(vector + label + hash + index {fp.extra['index_bytes'] / args.n:.0f} B/entry)"
    )

    q, labels = stream.fresh_queries(args.queries)
    want = names[labels].tolist()
    t = time.perf_counter()
    got = sub.predict(Batch(q))
    batched = (time.perf_counter() - t) / len(q) * 1e3
    c0 = time.thread_time()
    single = [sub.predict(Batch(q[i : i + 1]))[0] for i in range(min(len(q), 50))]
    single_ms = (time.thread_time() - c0) / len(single) * 1e3
    assert single == got[: len(single)]  # one by one = batched
    acc = float(np.mean([a == b for a, b in zip(got, want)]))
    print(
        f"  predict: fresh-query accuracy {acc:.3f} ({len(q)} queries); {single_ms:.1f} ms/query one at a time "
        f"(CPU, 1 thread), {batched:.1f} ms/query batched (wall)"
    )
    if not args.no_verify:
        t = time.perf_counter()
        ok = sub.verify().ok
        print(
            f"  verify: chain of {len(sub.ledger_):,} entries {'intact' if ok else 'BROKEN'} "
            f"in {time.perf_counter() - t:.0f} s"
        )
    mem = proc_status()
    print(
        f"  at the end: anonymous {mem['RssAnon']:.2f} GB, file-backed {mem['RssFile']:.2f} GB (verify pages the "
        f"whole vector file in; the kernel drops those pages under memory pressure), peak RSS {mem['VmHWM']:.2f} GB "
        "(file-backed pages included)"
    )


if __name__ == "__main__":
    main()
