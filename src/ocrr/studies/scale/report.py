"""The scale study's outputs: scale.csv, scale.md (tables per backend and query set, and notes) and
the recall/accuracy figure; ``read_csv`` parses a scale.csv back."""

from __future__ import annotations

import csv
import json
import math
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ocrr.specs import parse_value
from ocrr.studies.scale.config import ScaleConfig
from ocrr.studies.scale.memory import ledger_bytes_per_entry

# Paper 6.5 (HNSW M=16, efC=200, ef=64; GPU brute force), for side-by-side tables.
PAPER = {
    10_000: dict(brute_acc=1.000, hnsw_acc=1.000, gap=0.000, recall=0.692, agreement=1.000, ms=0.99),
    100_000: dict(brute_acc=1.000, hnsw_acc=1.000, gap=0.000, recall=0.542, agreement=1.000, ms=0.63),
    1_000_000: dict(brute_acc=1.000, hnsw_acc=0.990, gap=0.010, recall=0.390, agreement=0.990, ms=0.78),
    10_000_000: dict(brute_acc=1.000, hnsw_acc=0.990, gap=0.010, recall=0.226, agreement=0.990, ms=0.89),
}


def scale_label(n: int) -> str:
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n % div == 0 and n >= div:
            return f"{n // div}{suffix}"
    return str(n)


def data_description(cfg: ScaleConfig) -> str:
    if cfg.family == "subspace":
        return (
            f"subspace family: {cfg.n_classes} classes in a random {cfg.intrinsic_dim}-dimensional subspace of "
            f"{cfg.dim} dimensions, sigma {cfg.sigma} per intrinsic dimension (noise norm "
            f"~{cfg.sigma * math.sqrt(cfg.intrinsic_dim):.2f} vs unit centroids), ambient noise {cfg.ambient} "
            f"per dimension"
        )
    return (
        f"{cfg.n_classes} classes, dim {cfg.dim}, sigma {cfg.sigma} per dimension (noise norm "
        f"~{cfg.sigma * math.sqrt(cfg.dim):.2f} vs unit centroids)"
    )


def _fmt(value, spec: str) -> str:
    try:
        return (
            "n/a"
            if value is None or value == "" or (isinstance(value, float) and math.isnan(value))
            else format(value, spec)
        )
    except (TypeError, ValueError):
        return str(value)


def _tuning_description(cfg: ScaleConfig) -> str:
    targets = [
        f"recall@{cfg.k} >= {cfg.target_recall}" if cfg.target_recall else "",
        f"vote agreement with exact >= {cfg.target_agreement} (Wilson bound)" if cfg.target_agreement else "",
    ]
    targets = [t for t in targets if t]
    if not targets:
        return f"nprobe {cfg.nprobe}, re-rank {cfg.rerank}"
    fallback = (
        f"; no setting meeting them: the cheapest within {cfg.tune_tolerance} of the best bound"
        if cfg.tune_tolerance
        else ""
    )
    return (
        f"nprobe and re-rank depth tuned for {' and '.join(targets)} on "
        f"{cfg.tune_queries or cfg.n_queries} held-out stored entries{fallback}"
    )


def markdown(rows: list[dict], cfg: ScaleConfig, notes: Sequence[str] = ()) -> str:
    k = cfg.k
    out = [
        "# Substrate scale study (paper 6.5)\n",
        f"{data_description(cfg)}, {cfg.n_queries} queries per set, "
        f"k={k}, margin 0.05 vote; HNSW M={cfg.hnsw_m}, efConstruction={cfg.ef_construction}, "
        f"efSearch={cfg.ef_search}; IVF: nlist {cfg.nlist or 'automatic (largest power of 2 <= 4 sqrt N)'}, "
        f"{_tuning_description(cfg)}; "
        f"{cfg.threads} thread(s) for builds. ms/q = CPU ms of one query per call "
        f"on one thread (wall time is in the CSV; the machine was shared); build s = wall (CSV: CPU; for IVF "
        f"it includes k-means and list assignment); peak MB = peak RSS of the process that ran the scale "
        f"(ru_maxrss: anonymous plus any mapped file pages; the IVF re-rank reads the on-disk vector file "
        f"with pread, so its pages stay in the kernel's page cache, not in this figure; the anonymous and "
        f"file-backed peaks are apart in the CSV).\n",
    ]
    approx = [b for b in dict.fromkeys(r["backend"] for r in rows) if b != "exact"]
    for mode in dict.fromkeys(r["queries"] for r in rows):
        for b in approx:
            sel = [r for r in rows if r["queries"] == mode and r["backend"] == b]
            ex = {r["scale"]: r for r in rows if r["queries"] == mode and r["backend"] == "exact"}
            ivf = b.startswith("ivf")
            out.append(f"\n## {b} vs exact, {mode} queries\n")
            out.append(
                f"| Scale | brute_acc | {b}_acc | gap | recall@{k} | agreement | {b} ms/q | exact ms/q "
                f"| {b} build s | {b} B/entry | peak MB |"
                + (" nprobe | rerank | tuned recall | tuned agreement | peak anon / file MB |" if ivf else "")
            )
            out.append("| --- " * (16 if ivf else 11) + "|")
            for r in sel:
                e = ex.get(r["scale"])
                exact_ms = f"{e['ms_per_query']:.2f}" if e else "n/a"
                line = (
                    f"| {scale_label(r['scale'])} | {r['brute_acc']:.3f} | {r['acc']:.3f} | {r['gap']:+.3f} "
                    f"| {r[f'recall@{k}']:.3f} | {r['agreement']:.3f} | {r['ms_per_query']:.2f} | {exact_ms} "
                    f"| {r['build_s']:.1f} | {r['index_bytes_per_entry']:.0f} | {r['peak_rss_mb']:.0f} |"
                )
                if ivf:
                    line += (
                        f" {_fmt(r.get('nprobe'), 'd')} | {_fmt(r.get('rerank'), 'd')} "
                        f"| {_fmt(r.get('tuned_recall'), '.3f')} | {_fmt(r.get('tuned_agreement'), '.3f')} "
                        f"| {_fmt(r.get('peak_anon_mb'), '.0f')} / {_fmt(r.get('peak_file_mb'), '.0f')} |"
                    )
                out.append(line)
    out.append("\n## Paper 6.5 (for comparison)\n")
    out.append("| Scale | brute_acc | hnsw_acc | gap | recall@5 | agreement | hnsw ms/q |")
    out.append("| --- " * 7 + "|")
    for n, p in PAPER.items():
        out.append(
            f"| {scale_label(n)} | {p['brute_acc']:.3f} | {p['hnsw_acc']:.3f} | {p['gap']:+.3f} "
            f"| {p['recall']:.3f} | {p['agreement']:.3f} | {p['ms']:.2f} |"
        )
    if notes:
        out.append("\n## Notes\n")
        out.extend(f"- {n}" for n in notes)
    return "\n".join(out) + "\n"


def study_notes(dim: int) -> list[str]:
    """The notes under scale.md's tables: the ledger's measured bytes per entry; what brute_acc and exact ms/q are."""
    led = ledger_bytes_per_entry(dim)
    return [
        f"Ledger bytes per entry (tracemalloc, 16384-entry ocrr Ledger, no texts): {led['total']:.0f} = "
        f"{led['vector_buffer']:.0f} float32 vector + {led['python_objects']:.0f} of Python objects (id, "
        f"label, prev-hash and hash per entry); the capacity-doubling buffer can hold up to 2x the vectors "
        f"right after it grows. Exact search reads the ledger's buffer (0 extra bytes); an approximate "
        f"backend adds its B/entry on top (IVF: codes, list ids and centroids; its re-rank reads the "
        f"ledger's float32 vectors, in RAM or memory-mapped).",
        "brute_acc: the substrate vote over exact top-k (streamed ground truth); exact ms/q: numpy "
        "ExactIndex over the vectors held in memory (n/a when not held).",
    ]


def write_csv(rows: list[dict], path: Path) -> None:
    keys = list(dict.fromkeys(key for r in rows for key in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


def figure(rows: list[dict], cfg: ScaleConfig, stem: Path) -> list[Path]:
    """recall@k (left) and accuracy (right) vs N, log x; PNG and SVG."""
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "ocrr-scale"
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax_r, ax_a = fig.subplots(1, 2)
    k = cfg.k
    styles = {"fresh": "-", "stored": "--"}
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    colours = {b: ("black" if b == "exact" else f"C{i}") for i, b in enumerate(backends)}
    for mode in dict.fromkeys(r["queries"] for r in rows):
        ls = styles.get(mode, ":")
        for b in backends:
            sel = sorted((r for r in rows if r["queries"] == mode and r["backend"] == b), key=lambda r: r["scale"])
            if not sel:
                continue
            xs = [r["scale"] for r in sel]
            style = dict(color=colours[b], marker="s" if b == "exact" else "o", label=f"{b}, {mode} queries")
            if b != "exact":
                ax_r.plot(xs, [r[f"recall@{k}"] for r in sel], ls, **style)
            ax_a.plot(xs, [r["acc"] for r in sel], ls, **style)
    pn = sorted(PAPER)
    ax_r.plot(pn, [PAPER[n]["recall"] for n in pn], ":", color="grey", marker="x", label="paper 6.5 (HNSW)")
    ax_a.plot(pn, [PAPER[n]["hnsw_acc"] for n in pn], ":", color="grey", marker="x", label="paper 6.5 (HNSW)")
    for ax, title in ((ax_r, f"recall@{k} vs exact"), (ax_a, "substrate vote accuracy")):
        ax.set_xscale("log")
        ax.set_xlabel("entries N")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("\n".join(textwrap.wrap(f"synthetic class-incremental: {data_description(cfg)}", 140)), fontsize=9)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_suffix(f".{ext}")
        fig.savefig(p, dpi=120)
        paths.append(p)
    return paths


def read_csv(path: Path) -> list[dict]:
    """Rows of a scale.csv, numbers parsed back."""
    with open(path, newline="") as f:
        return [{k: parse_value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_outputs(rows: list[dict], cfg: ScaleConfig, out: Path, notes: Sequence[str] = ()) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "scale.csv", "md": out / "scale.md"}
    points = {f"{r['backend']} {r['scale']}": r["tuning_points"] for r in rows if r.get("tuning_points")}
    if points:  # every (nprobe, rerank) the IVF tuning tried, with its recall and cost
        paths["tuning"] = out / "tuning.json"
        paths["tuning"].write_text(json.dumps(points, indent=1))
    write_csv([{k: v for k, v in r.items() if k != "tuning_points"} for r in rows], paths["csv"])
    paths["md"].write_text(markdown(rows, cfg, notes))
    png, svg = figure(rows, cfg, out / "scale_recall_accuracy")
    paths.update(png=png, svg=svg)
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=list))
    paths["config"] = out / "config.json"
    return paths
