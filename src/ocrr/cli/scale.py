"""``ocrr scale``: the synthetic 10k -> 10M scale study, and the real-embedding point.

Options are validated here and turned into one ``ocrr.studies.scale.config.ScaleConfig``
(or, with ``--real``, one ``ocrr.studies.scale.real.run_real`` call).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import fields
from pathlib import Path

from rich.console import Console

from ocrr.cli.common import add_command, console, print_hint
from ocrr.cli.paths import output_folder, output_path
from ocrr.errors import OcrrError
from ocrr.index import IVF_KINDS
from ocrr.index.ivf_tune import min_queries_for
from ocrr.studies.scale.config import APPROXIMATE_BACKENDS, MAX_SCALE, ScaleConfig
from ocrr.studies.scale.real import run_real, write_real_outputs
from ocrr.studies.scale.report import scale_label, study_notes, write_outputs
from ocrr.studies.scale.study import run_study


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "scale",
        run,
        help="the synthetic 10k -> 10M scale study: exact vs HNSW/IVF under the substrate's vote",
        description="Synthetic class-incremental data (random unit centroids + Gaussian noise, or "
        "classes in a low-dimensional subspace with --family subspace); at each scale, "
        "exact and approximate top-k feed the substrate's vote. Writes scale.csv, scale.md "
        "and scale_recall_accuracy.png/.svg. --real instead measures Banking77 + CLINC150 "
        "embeddings as one ledger (real.csv, real.md). See ocrr.studies.scale.study for what is measured "
        "and how.",
    )
    p.add_argument(
        "--scales",
        default="10000,100000,1000000",
        help="comma-separated entry counts (default 10000,100000,1000000). 10M: --scales 10000000 "
        "--backends ivf_pq,ivf_sq8 --exact no (the float32 vectors go to a scratch file in "
        "--vectors-dir); an HNSW graph at 10M takes hours to build on a few cores",
    )
    p.add_argument(
        "--family",
        choices=("gaussian", "subspace"),
        default="gaussian",
        help="gaussian: isotropic noise in all dimensions (default); subspace: classes in a random "
        "--intrinsic-dim subspace, closer to sentence embeddings",
    )
    p.add_argument("--intrinsic-dim", type=int, default=16, help="subspace family: its dimension (default 16)")
    p.add_argument(
        "--ambient",
        type=float,
        default=0.005,
        help="subspace family: isotropic noise per dimension on top (default 0.005)",
    )
    p.add_argument(
        "--sigma",
        type=float,
        default=0.3,
        help="noise per (intrinsic) dimension (default 0.3: noise norm ~5.9 at dim 384, so fresh "
        "queries are barely separable; try 0.1)",
    )
    p.add_argument("--classes", type=int, default=100, help="number of classes (default 100)")
    p.add_argument("--dim", type=int, default=384, help="dimension (default 384)")
    p.add_argument("--queries", type=int, default=200, help="queries per query set (default 200)")
    p.add_argument(
        "--query-modes",
        default="fresh,stored",
        help="fresh (new draws) and/or stored (entries queried with their own vector); default both",
    )
    p.add_argument(
        "--backends",
        default="hnsw",
        help=f"approximate backends compared with exact: {', '.join(APPROXIMATE_BACKENDS)} (default hnsw)",
    )
    p.add_argument(
        "--exact",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also hold the vectors in memory and time exact search (auto: when they take "
        "<= --exact-max-gb); the exact ground truth is computed either way",
    )
    p.add_argument("--exact-max-gb", type=float, default=4.0, help="limit for --exact auto (default 4)")
    p.add_argument("--hnsw-m", type=int, default=16, help="HNSW M (default 16)")
    p.add_argument("--ef-construction", type=int, default=200, help="HNSW efConstruction (default 200)")
    p.add_argument("--ef-search", type=int, default=64, help="HNSW efSearch (default 64)")
    p.add_argument("--nlist", type=int, default=0, help="IVF lists (default 0: largest power of 2 <= 4 sqrt N)")
    p.add_argument(
        "--target-recall",
        type=float,
        default=0.95,
        help="tune IVF nprobe and re-rank depth for this recall@5 on held-out stored entries "
        "(default 0.95; 0: use --nprobe and --rerank)",
    )
    p.add_argument(
        "--target-agreement",
        type=float,
        default=0.0,
        help="tune IVF nprobe and re-rank depth for the substrate's vote over the IVF top-5 to agree "
        "with the vote over the exact top-5 on held-out stored entries, at this Wilson lower bound "
        "(e.g. 0.99; needs --tune-queries >= 4t/(1-t): 396 for 0.99; default 0: off). With "
        "--target-recall also > 0, a setting must meet both",
    )
    p.add_argument(
        "--tune-queries",
        type=int,
        default=0,
        help="held-out stored entries the IVF tuning scores (default 0: --queries)",
    )
    p.add_argument(
        "--tune-tolerance",
        type=float,
        default=0.0,
        help="when no setting meets the targets, keep the cheapest whose bound is within this of the "
        "best bound (default 0: the best setting, however expensive)",
    )
    p.add_argument(
        "--cold-queries",
        action="store_true",
        help="also time IVF single queries right after the vector file left the page cache (only "
        "with an IVF backend and the vectors on disk: --exact no)",
    )
    p.add_argument(
        "--also-time",
        default="",
        help="IVF: also score and time each kind at these nprobe/rerank settings besides the tuned "
        "one, e.g. 32/80,256/160 (rows named ivf_pq@32/80)",
    )
    p.add_argument("--nprobe", type=int, default=16, help="IVF lists probed when not tuned (default 16)")
    p.add_argument("--rerank", type=int, default=100, help="IVF candidates re-ranked when not tuned (default 100)")
    p.add_argument(
        "--vectors-dir",
        default=None,
        help="folder for the float32 scratch file the IVF re-rank reads when the vectors are not "
        "held in memory (default: the temp folder; 15.4 GB at 10M x 384)",
    )
    p.add_argument(
        "--order",
        choices=("class", "shuffled"),
        default="class",
        help="insertion order into the approximate index: class (class by class, as a "
        "class-incremental ledger grows; default) or shuffled (same entries, random order)",
    )
    p.add_argument(
        "--real",
        action="store_true",
        help="the real-embedding point instead: Banking77 + CLINC150 train and test vectors as one "
        "ledger, queried with the test items (needs the datasets; see --data-dir)",
    )
    p.add_argument("--data-dir", default=None, help="--real: folder holding the dataset files (else $OCRR_DATA_DIR)")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    p.add_argument("--threads", type=int, default=2, help="FAISS / BLAS threads (default 2)")
    p.add_argument(
        "--out", type=output_path, default=Path("results/scale"), help="output folder (default results/scale)"
    )
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="run every scale in this process (default: a fresh process per scale, so the "
        "peak memory column is per scale)",
    )
    # the synthetic study's options, as --real would ignore them: their defaults, to tell a given one
    p.set_defaults(synthetic_defaults={flag: p.get_default(dest) for flag, dest in SYNTHETIC_ONLY.items()})


# --flag -> its dest: the options of the synthetic study, which --real does not read
SYNTHETIC_ONLY = {
    f"--{dest.replace('_', '-')}": dest
    for dest in (
        "scales",
        "family",
        "intrinsic_dim",
        "ambient",
        "sigma",
        "classes",
        "dim",
        "query_modes",
        "exact",
        "exact_max_gb",
        "hnsw_m",
        "ef_construction",
        "ef_search",
        "cold_queries",
        "also_time",
        "nprobe",
        "rerank",
        "vectors_dir",
        "order",
        "no_isolate",
    )
}


def run(args) -> int:
    backends = tuple(_csv_list(args.backends, "backends"))
    for b in backends:
        if b not in APPROXIMATE_BACKENDS:
            raise OcrrError(
                f"--backends: {b!r} is not one of {', '.join(APPROXIMATE_BACKENDS)} (exact is always measured)."
            )
    if not 0 <= args.target_recall <= 1:
        raise OcrrError(f"--target-recall must be in [0, 1] (0: no tuning), got {args.target_recall}.")
    _check_real(args)
    _check_tuning(args)
    _check_settings(args)
    output_folder(args.out)
    if args.nlist < 0 or args.nprobe < 1 or args.rerank < 1:
        raise OcrrError("need --nlist >= 0 (0: automatic), --nprobe >= 1 and --rerank >= 1.")
    if args.threads < 1:
        raise OcrrError("need --threads >= 1.")
    screen = console()
    started = time.perf_counter()
    if args.real:
        return _run_real(args, backends, screen, started)
    cfg = _scale_config(args, backends)
    _check_cold_queries(cfg)
    notes = study_notes(args.dim)
    rows = run_study(
        cfg,
        isolate=not args.no_isolate,
        on_scale=lambda n, got: _print_rows(screen, n, got, cfg.k),
        out=args.out,
        notes=notes,
    )
    paths = write_outputs(rows, cfg, args.out, notes)
    screen.print(
        f"{len(cfg.scales)} scale(s) in {time.perf_counter() - started:.0f} s; wrote "
        f"{', '.join(p.name for p in paths.values())} to {args.out}/",
        highlight=False,
    )
    return 0


def _scale_config(args: argparse.Namespace, backends: tuple[str, ...]) -> ScaleConfig:
    """The study's settings: the options named as its fields, plus those parsed from text here."""
    scales = tuple(_scale(t, args.scales) for t in _csv_list(args.scales, "scales"))
    if any(n < args.classes for n in scales):
        raise OcrrError(f"every scale must be at least --classes ({args.classes}).")
    modes = tuple(_csv_list(args.query_modes, "query-modes"))
    if set(modes) - {"fresh", "stored"}:
        raise OcrrError(f"--query-modes: choose from fresh, stored; got {args.query_modes!r}.")
    if args.queries < 1 or args.dim < 1 or args.classes < 2:
        raise OcrrError("need --queries >= 1, --dim >= 1 and --classes >= 2.")
    if args.family == "subspace" and not 1 <= args.intrinsic_dim <= args.dim:
        raise OcrrError(f"--intrinsic-dim must be between 1 and --dim ({args.dim}), got {args.intrinsic_dim}.")
    if args.vectors_dir is not None and not Path(args.vectors_dir).is_dir():
        raise OcrrError(f"--vectors-dir {args.vectors_dir!r} is not a folder; create it or pick another.")
    parsed = dict(
        scales=scales,
        n_classes=args.classes,
        n_queries=args.queries,
        backends=backends,
        query_modes=modes,
        also_time=_settings(args.also_time),
    )
    same_name = {f.name: getattr(args, f.name) for f in fields(ScaleConfig) if hasattr(args, f.name)}
    return ScaleConfig(**{**same_name, **parsed})


def _scale(text: str, scales: str) -> int:
    """One entry count of --scales: a whole number (10000, or 1e4) up to ``MAX_SCALE``."""
    try:
        value = int(text) if text.lstrip("+-").isdigit() else float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value == int(value)):  # inf and nan, 1e4.5, 1500.5: not an entry count
        raise OcrrError(f"--scales {scales!r}: write whole numbers, e.g. 10000,100000,1000000.")
    if value > MAX_SCALE:
        raise OcrrError(
            f"--scales {scales!r}: {text} entries is more than the {MAX_SCALE:,} the study measures at most "
            "(100 times its 10M point, and within the 32-bit ids of FAISS's HNSW graph; the float32 vectors "
            "alone take scale x --dim x 4 bytes: 1.5 TB at 1e9 x 384). Give smaller scales, e.g. --scales 10000000."
        )
    return int(value)


def _print_rows(screen: Console, n: int, rows: list[dict], k: int) -> None:
    for r in rows:
        tuned = f", nprobe {r['nprobe']} rerank {r['rerank']}" if "nprobe" in r else ""
        screen.print(
            f"{scale_label(n):>5} {r['backend']:>9} {r['queries']:>6}: acc {r['acc']:.3f} "
            f"(exact {r['brute_acc']:.3f}), recall@{k} {r[f'recall@{k}']:.3f}, "
            f"agreement {r['agreement']:.3f}, {r['ms_per_query']:.2f} ms/q, build "
            f"{r['build_s']:.1f} s, peak {r['peak_rss_mb']:.0f} MB{tuned}",
            highlight=False,
        )


def _csv_list(text: str, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise OcrrError(f"--{what} is empty; pass a comma-separated list.")
    return items


def _settings(text: str) -> tuple[tuple[int, int], ...]:
    """--also-time 32/80,256/160 -> ((32, 80), (256, 160))."""
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


def _check_real(args) -> None:
    """--real measures the real embeddings, so the synthetic study's options would change nothing
    (and --data-dir is read by --real alone)."""
    if args.real:
        defaults = getattr(args, "synthetic_defaults", {})
        given = [flag for flag, default in defaults.items() if getattr(args, SYNTHETIC_ONLY[flag]) != default]
        if given:
            raise OcrrError(
                f"--real measures Banking77 + CLINC150's own embeddings, so {', '.join(given)} (of the synthetic "
                f"study) would be ignored. Drop {'it' if len(given) == 1 else 'them'}, or run the synthetic study "
                "without --real."
            )
    elif args.data_dir is not None:
        raise OcrrError(
            "--data-dir is where --real finds Banking77 and CLINC150; the synthetic study reads no dataset, so it "
            "would be ignored. Drop it, or add --real."
        )


def _check_cold_queries(cfg: ScaleConfig) -> None:
    """--cold-queries times the IVF kinds re-ranking from the vector file on disk: refused where
    no scale would be timed, said where some are not."""
    if not cfg.cold_queries:
        return
    if not any(b in IVF_KINDS for b in cfg.backends):
        raise OcrrError(
            f"--cold-queries times the IVF kinds ({', '.join(IVF_KINDS)}) after their vector file left the page "
            f"cache; --backends {','.join(cfg.backends)} has none, so it would time nothing. Add one, e.g. "
            "--backends ivf_pq, or drop --cold-queries."
        )
    in_memory = [n for n in cfg.scales if cfg.keep_exact(n)]
    if cfg.exact == "yes" or len(in_memory) == len(cfg.scales):
        why = "" if cfg.exact == "yes" else f" (they fit in --exact-max-gb {cfg.exact_max_gb:g})"
        raise OcrrError(
            f"--cold-queries needs the vectors on disk, but --exact {cfg.exact} holds them in memory at every "
            f"scale{why}, so it would time nothing. Add --exact no (with --vectors-dir on a disk that holds them), "
            "or drop --cold-queries."
        )
    if in_memory:
        print_hint(
            f"--cold-queries times nothing at {', '.join(scale_label(n) for n in in_memory)}: --exact auto holds "
            f"those scales' vectors in memory (at most --exact-max-gb {cfg.exact_max_gb:g}); --exact no times "
            "every scale."
        )


def _check_tuning(args) -> None:
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


def _check_settings(args) -> None:
    """The numbers the study takes as they are, each in the range where it means something
    (a NaN passes every comparison, so each is asked to be finite first)."""
    for flag, value, meaning in (
        ("--sigma", args.sigma, "the noise per dimension, e.g. 0.3; 0: none"),
        ("--ambient", args.ambient, "the subspace family's noise per dimension on top; 0: none"),
    ):
        if not (math.isfinite(value) and value >= 0):
            raise OcrrError(f"{flag} must be a finite number >= 0 ({meaning}), got {value}.")
    if not (math.isfinite(args.exact_max_gb) and args.exact_max_gb > 0):
        raise OcrrError(
            f"--exact-max-gb must be a finite number > 0 (the memory --exact auto may hold the vectors in; "
            f"to never hold them, pass --exact no), got {args.exact_max_gb}."
        )
    # the bounds FAISS's HNSW takes (ocrr.index.faiss_index.FaissIndex)
    if args.hnsw_m < 2 or args.ef_construction < 1 or args.ef_search < 1:
        raise OcrrError(
            f"need --hnsw-m >= 2, --ef-construction >= 1 and --ef-search >= 1, got {args.hnsw_m}, "
            f"{args.ef_construction} and {args.ef_search}."
        )
    if args.seed < 0:
        raise OcrrError(f"--seed must be a whole number >= 0, got {args.seed}.")


def _run_real(args, backends, screen, started) -> int:
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
    write_real_outputs(rows, args.out)
    for r in rows:
        screen.print(
            f"{r['backend']:>9}: recall@5 {r['recall@5']:.3f}, agreement {r['agreement']:.3f}, acc "
            f"{r['acc']:.3f} (exact {r['exact_acc']:.3f}), {r['ms_per_query']:.2f} ms/q",
            highlight=False,
        )
    screen.print(
        f"{rows[0]['entries']:,} entries in {time.perf_counter() - started:.0f} s; wrote real.csv, real.md "
        f"to {args.out}/",
        highlight=False,
    )
    return 0
