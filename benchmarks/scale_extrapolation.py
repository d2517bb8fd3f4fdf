"""Measured growth of the scale study, and what it implies at a scale not run (10M by default).

Run: python benchmarks/scale_extrapolation.py results/scale-sigma0.1/scale.csv [more scale.csv ...]
     [--target 10000000] [--dim 384] [--ram-gib 24]
     python benchmarks/scale_extrapolation.py --limits before/scale.csv after/scale.csv

``--limits`` prints, for every IVF row of each file, its figures beside the limits measured
in the same run (``limit_lines``): the build beside its FAISS adds alone (assignment,
encoding, packing: what any build of these lists pays), peak RSS beside the index's own
bytes (codes, ids, centroids: the floor), the first query after opening the saved index
(fresh processes; cold and warmed at open) beside the steady single query, with recall@k
and vote agreement on the same line.

For every backend of the given `ocrr scale` outputs it prints, per decade of N, the growth
factor of build time (wall and CPU), single-query ms, index bytes per entry and peak RSS,
then projects each to ``--target`` by applying the LAST measured decade's growth rate
(log-log slope; memory: the last decade's bytes per added entry), and states the memory a
substrate of that size needs with each index:
ledger (float32 vectors + measured per-entry objects) plus the index. Every projected
number is an extrapolation, printed as such; measured rows at the target (if a CSV has
them) are printed next to it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

from ocrr.studies.scale.study import ledger_bytes_per_entry, read_csv, scale_label

# (column, label, model): "power" fits y = a N^b through the last two scales; "affine" fits
# y = c + d N (memory: a fixed interpreter/library base plus bytes per entry, which a
# power law through small scales would underestimate); "last" keeps the largest scale's value
# (a per-entry size).
METRICS = [
    ("build_s", "build s (wall)", "power"),
    ("build_cpu_s", "build CPU s", "power"),
    ("ms_per_query", "ms/query", "power"),
    ("index_bytes_per_entry", "index B/entry", "last"),
    ("peak_rss_mb", "peak RSS MB", "affine"),
]


def slope(x0: float, y0: float, x1: float, y1: float) -> float:
    """Exponent b of y = a x^b through two points (nan when a value is not positive)."""
    if min(x0, y0, x1, y1) <= 0:
        return math.nan
    return math.log(y1 / y0) / math.log(x1 / x0)


def _fmt(row: dict, key: str, spec: str, missing: str = "not measured") -> str:
    value = row.get(key)
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(float(value), spec)


def limit_lines(path: Path, row: dict) -> list[str]:
    """One IVF row's figures, each beside the limit measured in the same run."""
    n, k = int(row["scale"]), int(row.get("k", 5))
    index_mb = float(row["index_bytes_per_entry"]) * n / 1e6
    build, adds = float(row["build_s"]), float(row.get("add_s", math.nan))
    peak = float(row["peak_rss_mb"]) * 1.048576  # ru_maxrss KiB / 1024 -> decimal MB
    return [
        f"{path} · {row['backend']} · {scale_label(n)} · {row['queries']} queries · nprobe {row.get('nprobe')} "
        f"rerank {row.get('rerank')}",
        f"  build {build:.0f} s wall, {float(row['build_cpu_s']):.0f} CPU-s (k-means {_fmt(row, 'kmeans_s', '.0f')} s, "
        f"codes {_fmt(row, 'train_codes_s', '.0f')} s) | limit: the FAISS adds alone {adds:.0f} s "
        f"(ratio {build / adds:.2f})",
        f"  peak RSS {peak:,.0f} MB (anonymous peak {_fmt(row, 'peak_anon_mb', ',.0f')} MiB) | limit: the index's "
        f"own bytes {index_mb:,.0f} MB ({float(row['index_bytes_per_entry']):.0f} B/entry; "
        f"ratio {peak / index_mb:.2f})",
        f"  first query after open: {_fmt(row, 'first_query_ms_open', '.2f')} ms cold, "
        f"{_fmt(row, 'first_query_ms_warm_open', '.2f')} ms warmed at open "
        f"(open {_fmt(row, 'open_s_warm_open', '.1f')} s)"
        f" | limit: the steady single query after the open, p50 {_fmt(row, 'p50_ms_after_warm_open', '.2f')} ms wall",
        f"  single query (thread CPU, cached) {float(row['ms_per_query']):.2f} ms, wall "
        f"{float(row.get('ms_per_query_wall', math.nan)):.2f} ms; vector file evicted "
        f"{_fmt(row, 'ms_per_query_cold_wall', '.2f')} ms wall",
        f"  recall@{k} {float(row[f'recall@{k}']):.3f}, vote agreement with exact {float(row['agreement']):.3f}, "
        f"vote accuracy {float(row['acc']):.3f} (exact {float(row['brute_acc']):.3f})",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", type=Path)
    ap.add_argument("--limits", action="store_true", help="print each IVF row beside its same-run limits")
    ap.add_argument("--target", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--ram-gib", type=float, default=24.0)
    ap.add_argument("--queries", default="fresh", help="which query set's timings to use (fresh|stored)")
    args = ap.parse_args()
    if args.limits:
        for path in args.csv:
            if not path.exists():
                sys.exit(f"{path}: not found. Give the scale.csv that `ocrr scale --out DIR` wrote.")
            for row in read_csv(path):
                if "nprobe" in row and row.get("nprobe") not in (None, ""):
                    print("\n".join(limit_lines(path, row)) + "\n")
        return

    # (sigma, backend) -> {scale: row}, merged over the files (a 10M run can sit in a folder of
    # its own); build and memory are per scale, query timings per query set
    series: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for path in args.csv:
        if not path.exists():
            sys.exit(f"{path}: not found. Give the scale.csv that `ocrr scale --out DIR` wrote.")
        for row in read_csv(path):
            if row["queries"] == args.queries:
                series[(f"sigma {row['sigma']}", row["backend"])][int(row["scale"])] = row

    target = args.target
    print(
        f"Growth per decade and projection to N = {scale_label(target)} "
        f"({args.queries} queries; projections apply the last measured decade's log-log slope)\n"
    )
    for (source, backend), by_scale in sorted(series.items()):
        scales = sorted(by_scale)
        print(f"## {source} · {backend}  (measured at {', '.join(scale_label(n) for n in scales)})")
        header = f"  {'metric':18s}" + "".join(f"{scale_label(n):>12s}" for n in scales)
        header += "   growth/10x (last)" + f"{'projected ' + scale_label(target):>18s}"
        print(header)
        for key, name, model in METRICS:
            values = [float(by_scale[n].get(key, math.nan)) for n in scales]
            line = f"  {name:18s}" + "".join(f"{v:12.2f}" for v in values)
            if target in by_scale or len(scales) < 2:
                print(line + ("   (measured at the target)" if target in by_scale else ""))
                continue
            (n0, v0), (n1, v1) = (scales[-2], values[-2]), (scales[-1], values[-1])
            if model == "last":
                print(line + f"   {'per entry: kept':>20s} {v1:14.1f}  [extrapolated]")
                continue
            if model == "affine":
                per_million = (v1 - v0) / (n1 - n0) * 1e6
                projected = v1 + per_million * (target - n1) / 1e6
                print(line + f"   {f'+{per_million:.0f} MB per 1M':>20s} {projected:14.1f}  [extrapolated]")
                continue
            b = slope(n0, v0, n1, v1)
            projected = v1 * (target / n1) ** b if not math.isnan(b) else math.nan
            growth = 10**b if not math.isnan(b) else math.nan
            print(line + f"   {growth:8.2f}x (b={b:+.2f}) {projected:16.1f}  [extrapolated]")
        print()

    n = target
    object_bytes = ledger_bytes_per_entry(args.dim)["python_objects"]  # measured here, per entry
    vec_gb = n * args.dim * 4 / 1e9
    objects_gb = n * object_bytes / 1e9
    ledger_gb = vec_gb + objects_gb
    ram_gb = args.ram_gib * 2**30 / 1e9
    print(
        f"Memory of a substrate with {scale_label(n)} entries of dim {args.dim} (a machine with "
        f"{args.ram_gib:g} GiB = {ram_gb:.1f} GB):"
    )
    print(
        f"  ledger: {vec_gb:.1f} GB float32 vectors + {objects_gb:.1f} GB per-entry objects "
        f"= {ledger_gb:.1f} GB (exact search reads this buffer: no index bytes)"
    )
    per_entry = {}
    for (_source, backend), by_scale in series.items():
        largest = max(by_scale)
        per_entry.setdefault(backend, float(by_scale[largest]["index_bytes_per_entry"]))
    for backend, bpe in sorted(per_entry.items()):
        index_gb = n * bpe / 1e9
        total = ledger_gb + index_gb
        verdict = "fits" if total < 0.8 * ram_gb else ("tight" if total < ram_gb else "does NOT fit")
        line = f"  + {backend:10s} index {bpe:7.0f} B/entry = {index_gb:5.1f} GB  -> {total:5.1f} GB  [{verdict}]"
        if backend != "exact":  # an index with its own copy or codes: the ledger's vectors can live on disk
            on_disk = objects_gb + index_gb
            ok = "fits" if on_disk < 0.8 * ram_gb else ("tight" if on_disk < ram_gb else "does NOT fit")
            line += f"; with vectors_on_disk: {on_disk:5.1f} GB in RAM [{ok}]"
        print(line)


if __name__ == "__main__":
    main()
