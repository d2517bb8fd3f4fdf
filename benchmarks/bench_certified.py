"""certified_sq8 against the float32 scan it must equal: one query at a size past the caches.

Stores ``--n`` rows built from real sentence embeddings (MiniLM; Banking77 and CLINC150's
training sentences when OCRR_DATA_DIR points at them, else the bundled demo set), each a
stored sentence plus a little noise (``--noise``), as a large deployment holds many
paraphrases. Queries are the test sentences, never stored. Prints, one thread, best of
``--rounds`` (each round times every figure back to back, so they share its conditions):

- the bare float32 matrix-vector product over every row: the limit of any exact float32 scan
  (memory bandwidth once the rows outgrow the caches);
- ``exact`` search (ExactIndex, one query);
- the 8-bit code scan alone (FAISS QT_8bit, the ``probe`` best): the floor of this design;
- ``certified_sq8``: the code scan, the proof and the float32 re-rank, with how many queries
  the proof covered, how many fell back to the full scan, and how many answers equal
  ``exact``'s (ids and similarities, bit for bit);
- the bytes each scans, and the time to code the rows.

Run: PYTHONPATH=src python benchmarks/bench_certified.py [--n 1000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from ocrr.index import CertifiedSQ8Index, ExactIndex
from ocrr.utils.threads import pin_threads


def sentences() -> tuple[np.ndarray, np.ndarray, str]:
    """(stored sentences' embeddings, test sentences' embeddings, where they come from)."""
    from ocrr.data import load_dataset
    from ocrr.encoders import embed_dataset

    names = ["banking77", "clinc150"] if os.environ.get("OCRR_DATA_DIR") else ["demo"]
    train, test = [], []
    for name in names:
        data = load_dataset(name)
        emb = embed_dataset(data, "minilm")  # cached after the first run
        train.append(np.asarray(emb.train, np.float32))
        test.append(np.asarray(emb.test, np.float32))
    return np.concatenate(train), np.concatenate(test), " + ".join(names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="stored rows (default 1,000,000)")
    ap.add_argument("--k", type=int, default=5, help="neighbours per query (default 5, the substrate's)")
    ap.add_argument("--noise", type=float, default=0.05, help="noise added to each stored copy (default 0.05)")
    ap.add_argument("--queries", type=int, default=100, help="queries per round (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; the best counts (default 3)")
    args = ap.parse_args()
    if args.n < 1 or args.k < 1 or args.queries < 1 or args.rounds < 1 or args.noise < 0:
        ap.error("--n, --k, --queries and --rounds must be at least 1, --noise at least 0")
    pin_threads()
    import faiss

    faiss.omp_set_num_threads(1)
    stored, tests, source = sentences()
    rng = np.random.default_rng(0)
    rows = stored[np.arange(args.n) % len(stored)]
    rows += args.noise * rng.standard_normal(rows.shape, dtype=np.float32) / np.sqrt(rows.shape[1])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    dim = rows.shape[1]
    queries = tests[rng.permutation(len(tests))[: args.queries * args.rounds]]
    ids = np.arange(args.n)

    t = time.perf_counter()
    certified = CertifiedSQ8Index(dim, source=lambda: rows)
    certified.add(rows, ids)  # borrowed: only the codes and bounds are new memory
    coding_s = time.perf_counter() - t
    exact = ExactIndex(dim, source=lambda: rows)
    exact.add(rows, ids)

    timed = {
        "matvec": lambda q: rows @ q,
        "exact": lambda q: exact.search(q[None], args.k),
        "codes": lambda q: certified._codes.search(q[None], min(certified.coded, certified.probe)),
        "certified": lambda q: certified.search(q[None], args.k),
    }
    best = dict.fromkeys(timed, float("inf"))
    for r in range(args.rounds):
        batch = queries[r * args.queries : (r + 1) * args.queries]
        for name, fn in timed.items():
            t = time.perf_counter()
            for q in batch:
                fn(q)
            best[name] = min(best[name], (time.perf_counter() - t) / len(batch))
    certified.certified = certified.fallbacks = 0
    equal = 0
    for q in queries:
        a, b = certified.search(q[None], args.k), exact.search(q[None], args.k)
        equal += bool(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))

    ms = {name: 1e3 * s for name, s in best.items()}
    print(f"certified_sq8 at {args.n:,} rows of {source} sentence embeddings (+ noise {args.noise}), d={dim}")
    print(f"one thread, k={args.k}, best of {args.rounds} rounds of {args.queries} test sentences")
    print(f"  bare float32 matvec        {ms['matvec']:9.2f} ms   (limit of a float32 scan)")
    print(f"  exact (one query)          {ms['exact']:9.2f} ms   ratio {ms['exact'] / ms['matvec']:.2f}x the matvec")
    print(
        f"  8-bit code scan alone      {ms['codes']:9.2f} ms   ratio {ms['codes'] / ms['matvec']:.2f}x"
        f"   (the floor of this design; probe {certified.probe})"
    )
    print(
        f"  certified_sq8              {ms['certified']:9.2f} ms   ratio {ms['certified'] / ms['matvec']:.2f}x"
        f"   proven {certified.certified}/{len(queries)}, full scans {certified.fallbacks},"
        f" equal to exact {equal}/{len(queries)}"
    )
    print(
        f"  bytes scanned per query    float32 {rows.nbytes / 2**20:,.0f} MB,"
        f" codes {certified.coded * dim / 2**20:,.0f} MB"
        f"; bounds kept {certified._bound.nbytes / 2**20:,.1f} MB; coding the rows took {coding_s:.1f} s"
    )


if __name__ == "__main__":
    main()
