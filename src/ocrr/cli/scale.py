"""``ocrr scale``: the synthetic 10k -> 10M scale study, and the real-embedding point.

Registered by ocrr.cli.main; options are validated here and turned into one
``ocrr.studies.scale.study.ScaleConfig`` (or, with ``--real``, one ``ocrr.studies.scale.real.run_real`` call).
"""

from __future__ import annotations

import time
from pathlib import Path

from ocrr.errors import OcrrError

APPROXIMATE = ("hnsw", "hnsw_sq8", "exact_sq8", "ivf", "ivf_sq8", "ivf_pq")


def add_scale_command(sub) -> None:
    sc = sub.add_parser(
        "scale",
        help="the synthetic 10k -> 10M scale study: exact vs HNSW/IVF under the substrate's vote",
        description="Synthetic class-incremental data (random unit centroids + Gaussian noise, or "
        "classes in a low-dimensional subspace with --family subspace); at each scale, "
        "exact and approximate top-k feed the substrate's vote. Writes scale.csv, scale.md "
        "and scale_recall_accuracy.png/.svg. --real instead measures Banking77 + CLINC150 "
        "embeddings as one ledger (real.csv, real.md). See ocrr.studies.scale.study for what is measured "
        "and how.",
    )
    sc.add_argument(
        "--scales",
        default="10000,100000,1000000",
        help="comma-separated entry counts (default 10000,100000,1000000). 10M: --scales 10000000 "
        "--backends ivf_pq,ivf_sq8 --exact no (the float32 vectors go to a scratch file in "
        "--vectors-dir); an HNSW graph at 10M takes hours to build on 2 cores",
    )
    sc.add_argument(
        "--family",
        choices=("gaussian", "subspace"),
        default="gaussian",
        help="gaussian: isotropic noise in all dimensions (default); subspace: classes in a random "
        "--intrinsic-dim subspace, closer to sentence embeddings",
    )
    sc.add_argument("--intrinsic-dim", type=int, default=16, help="subspace family: its dimension (default 16)")
    sc.add_argument(
        "--ambient",
        type=float,
        default=0.005,
        help="subspace family: isotropic noise per dimension on top (default 0.005)",
    )
    sc.add_argument(
        "--sigma",
        type=float,
        default=0.3,
        help="noise per (intrinsic) dimension (default 0.3: noise norm ~5.9 at dim 384, so fresh "
        "queries are barely separable; try 0.1)",
    )
    sc.add_argument("--classes", type=int, default=100, help="number of classes (default 100)")
    sc.add_argument("--dim", type=int, default=384, help="dimension (default 384)")
    sc.add_argument("--queries", type=int, default=200, help="queries per query set (default 200)")
    sc.add_argument(
        "--query-modes",
        default="fresh,stored",
        help="fresh (new draws) and/or stored (entries queried with their own vector); default both",
    )
    sc.add_argument(
        "--backends",
        default="hnsw",
        help=f"approximate backends compared with exact: {', '.join(APPROXIMATE)} (default hnsw)",
    )
    sc.add_argument(
        "--exact",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also hold the vectors in memory and time exact search (auto: when they take "
        "<= --exact-max-gb); the exact ground truth is computed either way",
    )
    sc.add_argument("--exact-max-gb", type=float, default=4.0, help="limit for --exact auto (default 4)")
    sc.add_argument("--hnsw-m", type=int, default=16, help="HNSW M (default 16)")
    sc.add_argument("--ef-construction", type=int, default=200, help="HNSW efConstruction (default 200)")
    sc.add_argument("--ef-search", type=int, default=64, help="HNSW efSearch (default 64)")
    sc.add_argument("--nlist", type=int, default=0, help="IVF lists (default 0: largest power of 2 <= 4 sqrt N)")
    sc.add_argument(
        "--target-recall",
        type=float,
        default=0.95,
        help="tune IVF nprobe and re-rank depth for this recall@5 on held-out stored entries "
        "(default 0.95; 0: use --nprobe and --rerank)",
    )
    sc.add_argument(
        "--target-agreement",
        type=float,
        default=0.0,
        help="tune IVF nprobe and re-rank depth for the substrate's vote over the IVF top-5 to agree "
        "with the vote over the exact top-5 on held-out stored entries, at this Wilson lower bound "
        "(e.g. 0.99; needs --tune-queries >= 4t/(1-t): 396 for 0.99; default 0: off). With "
        "--target-recall also > 0, a setting must meet both",
    )
    sc.add_argument(
        "--tune-queries",
        type=int,
        default=0,
        help="held-out stored entries the IVF tuning scores (default 0: --queries)",
    )
    sc.add_argument(
        "--tune-tolerance",
        type=float,
        default=0.0,
        help="when no setting meets the targets, keep the cheapest whose bound is within this of the "
        "best bound (default 0: the best setting, however expensive)",
    )
    sc.add_argument(
        "--cold-queries",
        action="store_true",
        help="also time IVF single queries right after the vector file left the page cache (only "
        "with the vectors on disk: --exact no)",
    )
    sc.add_argument(
        "--also-time",
        default="",
        help="IVF: also score and time each kind at these nprobe/rerank settings besides the tuned "
        "one, e.g. 32/80,256/160 (rows named ivf_pq@32/80)",
    )
    sc.add_argument("--nprobe", type=int, default=16, help="IVF lists probed when not tuned (default 16)")
    sc.add_argument("--rerank", type=int, default=100, help="IVF candidates re-ranked when not tuned (default 100)")
    sc.add_argument(
        "--vectors-dir",
        default=None,
        help="folder for the float32 scratch file the IVF re-rank reads when the vectors are not "
        "held in memory (default: the temp folder; 15.4 GB at 10M x 384)",
    )
    sc.add_argument(
        "--order",
        choices=("class", "shuffled"),
        default="class",
        help="insertion order into the approximate index: class (class by class, as a "
        "class-incremental ledger grows; default) or shuffled (same entries, random order)",
    )
    sc.add_argument(
        "--real",
        action="store_true",
        help="the real-embedding point instead: Banking77 + CLINC150 train and test vectors as one "
        "ledger, queried with the test items (needs the datasets; see --data-dir)",
    )
    sc.add_argument("--data-dir", default=None, help="--real: folder holding the dataset files (else $OCRR_DATA_DIR)")
    sc.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    sc.add_argument("--threads", type=int, default=2, help="FAISS / BLAS threads (default 2)")
    sc.add_argument("--out", type=Path, default=Path("results/scale"), help="output folder (default results/scale)")
    sc.add_argument(
        "--no-isolate",
        action="store_true",
        help="run every scale in this process (default: a fresh process per scale, so the "
        "peak memory column is per scale)",
    )
    sc.set_defaults(handler=run_scale_command)


def _csv_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise OcrrError(f"--{what} is empty; pass a comma-separated list.")
    return items


def run_scale_command(args) -> int:
    from ocrr.cli.main import _console
    from ocrr.studies.scale.study import ScaleConfig, ledger_bytes_per_entry, run_study, scale_label, write_outputs

    backends = tuple(_csv_list(args.backends, "backends"))
    for b in backends:
        if b not in APPROXIMATE:
            raise OcrrError(f"--backends: {b!r} is not one of {', '.join(APPROXIMATE)} (exact is always measured).")
    if not 0 <= args.target_recall <= 1:
        raise OcrrError(f"--target-recall must be in [0, 1] (0: no tuning), got {args.target_recall}.")
    _check_tuning(args)
    if args.nlist < 0 or args.nprobe < 1 or args.rerank < 1:
        raise OcrrError("need --nlist >= 0 (0: automatic), --nprobe >= 1 and --rerank >= 1.")
    if args.threads < 1:
        raise OcrrError("need --threads >= 1.")
    console = _console()
    started = time.perf_counter()
    if args.real:
        return _real(args, backends, console, started)
    try:
        scales = tuple(int(float(t)) for t in _csv_list(args.scales, "scales"))
    except ValueError:
        raise OcrrError(f"--scales {args.scales!r}: write whole numbers, e.g. 10000,100000,1000000.") from None
    if any(n < args.classes for n in scales):
        raise OcrrError(f"every scale must be at least --classes ({args.classes}).")
    modes = tuple(_csv_list(args.query_modes, "query-modes"))
    if set(modes) - {"fresh", "stored"}:
        raise OcrrError(f"--query-modes: choose from fresh, stored; got {args.query_modes!r}.")
    if args.sigma < 0 or args.queries < 1 or args.dim < 1 or args.classes < 2:
        raise OcrrError("need --sigma >= 0, --queries >= 1, --dim >= 1 and --classes >= 2.")
    if args.family == "subspace" and not 1 <= args.intrinsic_dim <= args.dim:
        raise OcrrError(f"--intrinsic-dim must be between 1 and --dim ({args.dim}), got {args.intrinsic_dim}.")
    if args.vectors_dir is not None and not Path(args.vectors_dir).is_dir():
        raise OcrrError(f"--vectors-dir {args.vectors_dir!r} is not a folder; create it or pick another.")
    cfg = ScaleConfig(
        scales=scales,
        n_classes=args.classes,
        dim=args.dim,
        sigma=args.sigma,
        n_queries=args.queries,
        seed=args.seed,
        backends=backends,
        exact=args.exact,
        exact_max_gb=args.exact_max_gb,
        query_modes=modes,
        hnsw_m=args.hnsw_m,
        ef_construction=args.ef_construction,
        ef_search=args.ef_search,
        threads=args.threads,
        order=args.order,
        family=args.family,
        intrinsic_dim=args.intrinsic_dim,
        ambient=args.ambient,
        nlist=args.nlist,
        nprobe=args.nprobe,
        rerank=args.rerank,
        target_recall=args.target_recall,
        vectors_dir=args.vectors_dir,
        target_agreement=args.target_agreement,
        tune_queries=args.tune_queries,
        tune_tolerance=args.tune_tolerance,
        cold_queries=args.cold_queries,
        also_time=_settings(args.also_time),
    )
    rows: list[dict] = []

    def progress(n, got):
        rows.extend(got)
        for r in got:
            tuned = f", nprobe {r['nprobe']} rerank {r['rerank']}" if "nprobe" in r else ""
            console.print(
                f"{scale_label(n):>5} {r['backend']:>9} {r['queries']:>6}: acc {r['acc']:.3f} "
                f"(exact {r['brute_acc']:.3f}), recall@{cfg.k} {r[f'recall@{cfg.k}']:.3f}, "
                f"agreement {r['agreement']:.3f}, {r['ms_per_query']:.2f} ms/q, build "
                f"{r['build_s']:.1f} s, peak {r['peak_rss_mb']:.0f} MB{tuned}",
                highlight=False,
            )
        write_outputs(rows, cfg, args.out, notes)  # partial results survive an interrupted long run

    led = ledger_bytes_per_entry(args.dim)
    notes = [
        f"Ledger bytes per entry (tracemalloc, 16384-entry ocrr Ledger, no texts): {led['total']:.0f} = "
        f"{led['vector_buffer']:.0f} float32 vector + {led['python_objects']:.0f} of Python objects (id, "
        f"label, prev-hash and hash per entry); the capacity-doubling buffer can hold up to 2x the vectors "
        f"right after it grows. Exact search reads the ledger's buffer (0 extra bytes); an approximate "
        f"backend adds its B/entry on top (IVF: codes, list ids and centroids; its re-rank reads the "
        f"ledger's float32 vectors, in RAM or memory-mapped).",
        "brute_acc: the substrate vote over exact top-k (streamed ground truth); exact ms/q: numpy "
        "ExactIndex over the vectors held in memory (n/a when not held).",
    ]
    run_study(cfg, isolate=not args.no_isolate, on_scale=progress)
    paths = write_outputs(rows, cfg, args.out, notes)
    console.print(
        f"{len(scales)} scale(s) in {time.perf_counter() - started:.0f} s; wrote "
        f"{', '.join(p.name for p in paths.values())} to {args.out}/",
        highlight=False,
    )
    return 0


def _settings(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            nprobe, rerank = (int(v) for v in item.split("/"))
        except ValueError:
            raise OcrrError(f"--also-time {item!r}: write nprobe/rerank pairs, e.g. 32/80,256/160.") from None
        if nprobe < 1 or rerank < 1:
            raise OcrrError(f"--also-time {item!r}: nprobe and rerank must be >= 1.")
        out.append((nprobe, rerank))
    return tuple(out)


def _check_tuning(args) -> None:
    from ocrr.index.ivf_tune import min_queries_for

    if not 0 <= args.target_agreement < 1:
        raise OcrrError(f"--target-agreement must be in [0, 1) (0: off), got {args.target_agreement}.")
    if not 0 <= args.tune_tolerance < 1:
        raise OcrrError(f"--tune-tolerance must be in [0, 1) (0: keep the best setting), got {args.tune_tolerance}.")
    if args.tune_queries < 0:
        raise OcrrError(f"--tune-queries must be >= 0 (0: --queries), got {args.tune_queries}.")
    if args.target_agreement > 0:
        have, need = args.tune_queries or args.queries, min_queries_for(args.target_agreement)
        if have < need:
            raise OcrrError(
                f"--target-agreement {args.target_agreement} cannot be certified with {have} tuning "
                f"queries; pass --tune-queries {need} (or more), or a lower target."
            )


def _real(args, backends, console, started) -> int:
    from ocrr.studies.scale.real import real_markdown, run_real
    from ocrr.studies.scale.report import write_csv

    rows = run_real(
        ("exact", *backends),
        data_dir=args.data_dir,
        target_recall=args.target_recall,
        nlist=args.nlist,
        threads=args.threads,
        seed=args.seed,
        target_agreement=args.target_agreement,
        tune_queries=args.tune_queries or args.queries,
        tune_tolerance=args.tune_tolerance,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.out / "real.csv")
    (args.out / "real.md").write_text(real_markdown(rows))
    for r in rows:
        console.print(
            f"{r['backend']:>9}: recall@5 {r['recall@5']:.3f}, agreement {r['agreement']:.3f}, acc "
            f"{r['acc']:.3f} (exact {r['exact_acc']:.3f}), {r['ms_per_query']:.2f} ms/q",
            highlight=False,
        )
    console.print(
        f"{rows[0]['entries']:,} entries in {time.perf_counter() - started:.0f} s; wrote real.csv, real.md "
        f"to {args.out}/",
        highlight=False,
    )
    return 0
