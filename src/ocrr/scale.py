"""The scale study (paper 6.5): exact vs approximate retrieval under the substrate's vote.

Synthetic class-incremental data: ``n_classes`` random unit centroids in ``dim``
dimensions; an entry of class c is ``centroid_c + N(0, sigma^2 I)``, L2-normalised;
entries arrive class by class (ids 0.. in class order), as a class-incremental stream
would append them to the ledger. At each scale N the study

1. streams the N entries in chunks (generated from per-block seeds, so any chunk can be
   regenerated and 10M x 384 float32 = 15.4 GB never has to be in memory at once),
2. computes the exact top-k of every query by brute force over the chunks (the ground
   truth; ``ocrr.index.exact_search`` semantics, merged with ``top_k``),
3. adds the chunks to each approximate backend (``hnsw`` by default; ``hnsw_sq8``,
   ``exact_sq8`` on request) in stream order (``order="class"``; ``"shuffled"`` inserts
   the same entries, same ids, in a random order -- HNSW graphs are sensitive to it)
   and, when it fits (``exact="auto"``: N x dim x 4 bytes <=
   ``exact_max_gb``), keeps the vectors in one array read by an ``ExactIndex`` in
   borrowed mode -- the unbounded substrate's exact path, whose query time is reported,
4. answers the queries with each backend and applies the substrate's vote
   (``ocrr.systems.vote.vote`` with the substrate's default ``VoteRule``: k=5,
   margin 0.05, count weighting, max-similarity then recency tie-breaks), and reports
   accuracy, the exact-vs-approximate gap, recall@k, prediction agreement, ms/query
   (one query per call on one thread, and one batched call), build time, index bytes per entry and
   the peak resident memory of the process that ran that scale.

Two query sets are scored at every scale (same build):

* ``fresh``: ``n_queries`` new draws from the class distributions (2 per class) -- the
  question a deployment asks: classify an unseen item;
* ``stored``: ``n_queries`` entries of the index itself, queried with their own vector.
  Such a query's nearest neighbour is itself (similarity 1.0), so with margin 0.05 the
  vote band usually holds the query alone and exact accuracy is 1.0 by construction,
  whatever sigma. The paper's 6.5 numbers (accuracy 1.000 at sigma 0.3, where fresh
  queries are barely separable) match this set, which is why it is reported too.

Peak memory is ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of a fresh process per
scale (``isolate=True``; psutil is not installed), so it includes the interpreter,
numpy and FAISS (~0.2 GB) and the transient chunk buffers, not just the index.
"""

from __future__ import annotations

import csv
import math
import resource
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ocrr.index import make_index, recall_at_k, top_k
from ocrr.index.exact import ExactIndex
from ocrr.systems.vote import VoteRule, vote

DEFAULT_SCALES = (10_000, 100_000, 1_000_000)
BLOCK = 4096  # rows per RNG block: any row is regenerated from its block alone
CHUNK_ROWS = 65_536  # rows per processing chunk (one add call per backend)

# Paper 6.5 (HNSW M=16, efC=200, ef=64; GPU brute force), for side-by-side tables.
PAPER = {
    10_000: dict(brute_acc=1.000, hnsw_acc=1.000, gap=0.000, recall=0.692, agreement=1.000, ms=0.99),
    100_000: dict(brute_acc=1.000, hnsw_acc=1.000, gap=0.000, recall=0.542, agreement=1.000, ms=0.63),
    1_000_000: dict(brute_acc=1.000, hnsw_acc=0.990, gap=0.010, recall=0.390, agreement=0.990, ms=0.78),
    10_000_000: dict(brute_acc=1.000, hnsw_acc=0.990, gap=0.010, recall=0.226, agreement=0.990, ms=0.89),
}


@dataclass
class ScaleConfig:
    scales: tuple[int, ...] = DEFAULT_SCALES
    n_classes: int = 100
    dim: int = 384
    sigma: float = 0.3
    n_queries: int = 200
    k: int = 5
    seed: int = 0
    backends: tuple[str, ...] = ("hnsw",)
    exact: str = "auto"  # "auto" | "yes" | "no": keep an in-memory exact index to time it
    exact_max_gb: float = 4.0
    query_modes: tuple[str, ...] = ("fresh", "stored")
    hnsw_m: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    threads: int = 2
    order: str = "class"  # insertion order into the approximate backends: "class" (the stream's) or "shuffled"
    index_params: dict = field(default_factory=dict)  # extra make_index parameters

    def keep_exact(self, n: int) -> bool:
        if self.exact == "yes":
            return True
        if self.exact == "no":
            return False
        return n * self.dim * 4 <= self.exact_max_gb * 1e9


# -- data ---------------------------------------------------------------------------------
class SyntheticStream:
    """Class-incremental Gaussian clusters, regenerable block by block."""

    def __init__(self, n: int, n_classes: int, dim: int, sigma: float, seed: int):
        if n < n_classes:
            raise ValueError(f"scale {n} is smaller than the number of classes {n_classes}")
        self.n, self.n_classes, self.dim, self.sigma, self.seed = n, n_classes, dim, sigma, seed
        cent = np.random.default_rng([seed, 0]).standard_normal((n_classes, dim))
        self.centroids = (cent / np.linalg.norm(cent, axis=1, keepdims=True)).astype(np.float32)
        counts = np.full(n_classes, n // n_classes)
        counts[: n % n_classes] += 1
        self.offsets = np.concatenate([[0], np.cumsum(counts)])  # class c holds ids offsets[c]..offsets[c+1]-1

    def labels_of(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, ids, side="right") - 1

    def _block(self, c: int, b: int) -> np.ndarray:
        lo = self.offsets[c] + b * BLOCK
        rows = int(min(self.offsets[c + 1], lo + BLOCK) - lo)
        rng = np.random.default_rng([self.seed, 1, c, b])
        x = rng.standard_normal((rows, self.dim), dtype=np.float32)
        x *= np.float32(self.sigma)
        x += self.centroids[c]
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def chunks(self, rows: int = CHUNK_ROWS):
        """Yield (first_id, vectors) in id order, ``rows`` at a time (the last may be
        shorter); chunks span class boundaries, so a small class does not mean small adds."""
        parts, have, first = [], 0, 0
        for c in range(self.n_classes):
            n_blocks = math.ceil((self.offsets[c + 1] - self.offsets[c]) / BLOCK)
            for b in range(n_blocks):
                block = self._block(c, b)
                while len(block):
                    take = min(rows - have, len(block))
                    parts.append(block[:take])
                    block = block[take:]
                    have += take
                    if have == rows:
                        yield first, np.concatenate(parts)
                        first += have
                        parts, have = [], 0
        if have:
            yield first, np.concatenate(parts)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Vectors of arbitrary ids (regenerates only their blocks)."""
        ids = np.asarray(ids, np.int64)
        out = np.empty((len(ids), self.dim), np.float32)
        cls = self.labels_of(ids)
        blk = (ids - self.offsets[cls]) // BLOCK
        for c, b in sorted(set(zip(cls.tolist(), blk.tolist()))):
            sel = np.flatnonzero((cls == c) & (blk == b))
            out[sel] = self._block(c, b)[ids[sel] - self.offsets[c] - b * BLOCK]
        return out

    def fresh_queries(self, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
        labels = np.arange(n_queries) % self.n_classes
        labels.sort()
        rng = np.random.default_rng([self.seed, 2])
        q = self.centroids[labels] + self.sigma * rng.standard_normal((n_queries, self.dim)).astype(np.float32)
        return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32), labels

    def stored_queries(self, n_queries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ids = np.sort(np.random.default_rng([self.seed, 3]).choice(self.n, size=min(n_queries, self.n), replace=False))
        return self.rows(ids), self.labels_of(ids), ids


# -- one scale ---------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _predict(stream: SyntheticStream, sims: np.ndarray, ids: np.ndarray, rule: VoteRule) -> np.ndarray:
    labels = np.where(ids >= 0, stream.labels_of(np.maximum(ids, 0)), -1)
    return vote(sims, ids, labels, rule)


def _time_queries(index, queries: np.ndarray, k: int, threads: int, repeats: int = 3) -> dict:
    """Query cost, measured two ways because the machine is shared:

    * ``ms_per_query``: CPU time of the calling thread per query, one query per call, FAISS
      and BLAS limited to ONE thread -- so it is the single-query latency an idle core
      would see, unaffected by waiting for a CPU other processes hold (best of
      ``repeats`` passes; one pass when a pass takes over 30 s);
    * ``ms_per_query_wall``: the wall time of the same best pass;
    * ``ms_per_query_batched`` / ``cpu_ms_per_query_batched``: one call with all queries
      on ``threads`` threads, wall time and process CPU time (all threads) per query.
    """
    import faiss
    from threadpoolctl import threadpool_limits

    index.search(queries[:2], k)  # warm-up
    cpu = wall = np.inf
    faiss.omp_set_num_threads(1)
    try:
        with threadpool_limits(1):
            for _ in range(repeats):
                c0, t0 = time.thread_time(), time.perf_counter()
                for i in range(len(queries)):
                    index.search(queries[i : i + 1], k)
                cpu, took = min(cpu, time.thread_time() - c0), time.perf_counter() - t0
                wall = min(wall, took)
                if took > 30:
                    break
    finally:
        faiss.omp_set_num_threads(threads)
    b_cpu = b_wall = np.inf
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        index.search(queries, k)
        b_cpu, took = min(b_cpu, time.process_time() - c0), time.perf_counter() - t0
        b_wall = min(b_wall, took)
        if took > 30:
            break
    per = 1000 / len(queries)
    return {"ms_per_query": cpu * per, "ms_per_query_wall": wall * per,
            "ms_per_query_batched": b_wall * per, "cpu_ms_per_query_batched": b_cpu * per}


def _add_all(backends: dict, x: np.ndarray, ids: np.ndarray, first_chunk: bool, build_s: dict,
             build_cpu: dict) -> None:
    for name, index in backends.items():
        t0, c0 = time.perf_counter(), time.process_time()
        if getattr(index, "compressed", False) and first_chunk:
            index.train(x)  # the 8-bit quantiser sees the head of the stream (the first chunk), as in a deployment
        index.add(x, ids)
        build_s[name] += time.perf_counter() - t0
        build_cpu[name] += time.process_time() - c0


def _band_size(sims: np.ndarray, ids: np.ndarray, margin: float) -> float:
    """Mean number of retrieved neighbours inside the vote's margin band."""
    valid = ids >= 0
    top = np.max(np.where(valid, sims, -np.inf), axis=1, keepdims=True)
    return float((valid & (sims >= top - margin)).sum(axis=1).mean())


def run_scale(n: int, cfg: ScaleConfig) -> list[dict]:
    """Build, query and score every backend at one scale; one row per (backend, query set)."""
    import faiss
    from threadpoolctl import threadpool_limits

    faiss.omp_set_num_threads(cfg.threads)
    with threadpool_limits(cfg.threads):
        return _run_scale(n, cfg)


def _run_scale(n: int, cfg: ScaleConfig) -> list[dict]:
    rss_start = _peak_rss_mb()
    stream = SyntheticStream(n, cfg.n_classes, cfg.dim, cfg.sigma, cfg.seed)
    rule = VoteRule(k=cfg.k)  # the substrate's default rule
    qsets = {}
    if "fresh" in cfg.query_modes:
        q, lab = stream.fresh_queries(cfg.n_queries)
        qsets["fresh"] = (q, lab, None)
    if "stored" in cfg.query_modes:
        q, lab, qids = stream.stored_queries(cfg.n_queries)
        qsets["stored"] = (q, lab, qids)
    truth = {m: (np.empty((len(q), 0), np.float32), np.empty((len(q), 0), np.int64)) for m, (q, _, _) in qsets.items()}

    params = dict(m=cfg.hnsw_m, ef_construction=cfg.ef_construction, ef_search=cfg.ef_search, **cfg.index_params)
    backends = {name: make_index(name, cfg.dim, **params) for name in cfg.backends}
    build_s = dict.fromkeys(backends, 0.0)
    build_cpu = dict.fromkeys(backends, 0.0)  # process CPU time (all threads) of the adds
    keep = cfg.keep_exact(n)
    store = np.empty((n, cfg.dim), np.float32) if keep else None
    exact = ExactIndex(cfg.dim, source=lambda: store) if keep else None  # borrowed: the substrate's exact path
    if keep:
        build_s["exact"] = build_cpu["exact"] = 0.0
    gen_s = gt_s = 0.0

    t_gen = time.perf_counter()
    for first, x in stream.chunks():
        ids = np.arange(first, first + len(x), dtype=np.int64)
        gen_s += time.perf_counter() - t_gen
        t0 = time.perf_counter()
        for m, (q, _, _) in qsets.items():
            s, i = top_k(q @ x.T, ids, cfg.k)
            ts, ti = truth[m]
            truth[m] = top_k(np.concatenate([ts, s], axis=1), np.concatenate([ti, i], axis=1), cfg.k)
        gt_s += time.perf_counter() - t0
        if keep:
            store[first : first + len(x)] = x  # the ledger append, not timed as index build
            t0, c0 = time.perf_counter(), time.process_time()
            exact.add(x, ids)
            build_s["exact"] += time.perf_counter() - t0
            build_cpu["exact"] += time.process_time() - c0
        if cfg.order == "class":
            _add_all(backends, x, ids, first == 0, build_s, build_cpu)
        t_gen = time.perf_counter()
    del x
    if cfg.order == "shuffled":  # same entries and ids, inserted into the backends in a random order
        perm = np.random.default_rng([cfg.seed, 4]).permutation(n)
        for lo in range(0, n, CHUNK_ROWS):
            ids = np.sort(perm[lo : lo + CHUNK_ROWS])
            x = store[ids] if keep else stream.rows(ids)
            _add_all(backends, x, ids, lo == 0, build_s, build_cpu)

    timed = dict(backends)
    if keep:
        assert exact.borrowed  # no second copy of the vectors
        timed = {"exact": exact, **backends}
    rows = []
    for name, index in timed.items():
        bytes_per_entry = index.nbytes / n
        for mode, (q, lab, qids) in qsets.items():
            t_s, t_i = truth[mode]
            exact_pred = _predict(stream, t_s, t_i, rule)
            timing = _time_queries(index, q, cfg.k, cfg.threads)
            s, i = index.search(q, cfg.k)
            pred = _predict(stream, s, i, rule)
            row = {
                "scale": n, "backend": name, "queries": mode, "n_queries": len(q), "sigma": cfg.sigma,
                "dim": cfg.dim, "n_classes": cfg.n_classes, "k": cfg.k,
                "brute_acc": float(np.mean(exact_pred == lab)),
                "acc": float(np.mean(pred == lab)),
                "gap": float(np.mean(exact_pred == lab) - np.mean(pred == lab)),
                f"recall@{cfg.k}": recall_at_k(i, t_i),
                "agreement": float(np.mean(pred == exact_pred)),
                "top1_same": float(np.mean(i[:, 0] == t_i[:, 0])),
                **timing,
                "build_s": build_s[name], "build_cpu_s": build_cpu[name], "index_bytes_per_entry": bytes_per_entry,
                "store_bytes_per_entry": 4 * cfg.dim,
                "mean_top1_sim": float(t_s[:, 0].mean()),
                "band_size": _band_size(s, i, rule.margin), "exact_band_size": _band_size(t_s, t_i, rule.margin),
                "self_hit": float(np.mean(i[:, 0] == qids)) if qids is not None else math.nan,
                "hnsw_m": cfg.hnsw_m, "ef_construction": cfg.ef_construction, "ef_search": cfg.ef_search,
                "threads": cfg.threads, "order": cfg.order, "gen_s": gen_s, "ground_truth_s": gt_s,
            }
            rows.append(row)
    peak = _peak_rss_mb()
    for row in rows:
        row["peak_rss_mb"] = peak
        row["rss_at_start_mb"] = rss_start
        row["exact_in_memory"] = keep
    return rows


# -- the study --------------------------------------------------------------------------------
def run_study(cfg: ScaleConfig, isolate: bool = True, on_scale=None) -> list[dict]:
    """Every scale, each in a fresh Python process when ``isolate`` (so peak memory is per
    scale and one scale's allocations cannot inflate the next's)."""
    rows: list[dict] = []
    for n in cfg.scales:
        got = _run_isolated(n, cfg) if isolate else run_scale(n, cfg)
        rows.extend(got)
        if on_scale:
            on_scale(n, got)
    return rows


def _run_isolated(n: int, cfg: ScaleConfig) -> list[dict]:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ocrr.scale", str(n), json.dumps(asdict(cfg))],
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scale {n}: the worker process failed (exit {proc.returncode}); see its stderr above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child_main(argv: list[str]) -> None:
    import json

    n, raw = int(argv[0]), json.loads(argv[1])
    for key in ("scales", "backends", "query_modes"):
        raw[key] = tuple(raw[key])
    print(json.dumps(run_scale(n, ScaleConfig(**raw))))


def ledger_bytes_per_entry(dim: int = 384, n: int = 16_384) -> dict:
    """Measured (tracemalloc) bytes per entry of an ``ocrr.ledger.Ledger`` with no texts.

    ``n`` is a power of two so the capacity-doubling vector buffer has no slack; returns
    {"total", "vector_buffer", "python_objects"} per entry. (Right after a doubling the
    buffer holds up to twice the live vectors: between 1x and 2x of ``4 * dim``.)
    """
    import tracemalloc

    from ocrr.ledger import Ledger

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    labels = [f"c{i % 100:03d}" for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    led = Ledger(dim)
    led.extend(x, labels)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    buffer = led.vector_buffer_bytes / n
    del led
    total = (after - before) / n
    return {"total": total, "vector_buffer": buffer, "python_objects": total - buffer}


def scale_label(n: int) -> str:
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n % div == 0 and n >= div:
            return f"{n // div}{suffix}"
    return str(n)


def markdown(rows: list[dict], cfg: ScaleConfig, notes: list[str] = ()) -> str:
    k = cfg.k
    out = [f"# Substrate scale study (paper 6.5)\n",
           f"{cfg.n_classes} classes, dim {cfg.dim}, sigma {cfg.sigma} per dimension (noise norm "
           f"~{cfg.sigma * math.sqrt(cfg.dim):.2f} vs unit centroids), {cfg.n_queries} queries per set, "
           f"k={k}, margin 0.05 vote; HNSW M={cfg.hnsw_m}, efConstruction={cfg.ef_construction}, "
           f"efSearch={cfg.ef_search}; {cfg.threads} thread(s) for builds. ms/q = CPU ms of one query per call "
           f"on one thread (wall time is in the CSV; the machine was shared); build s = wall (CSV: CPU); "
           f"peak MB = peak RSS of the process that ran the scale (ru_maxrss).\n"]
    approx = [b for b in dict.fromkeys(r["backend"] for r in rows) if b != "exact"]
    for mode in dict.fromkeys(r["queries"] for r in rows):
        for b in approx:
            sel = [r for r in rows if r["queries"] == mode and r["backend"] == b]
            ex = {r["scale"]: r for r in rows if r["queries"] == mode and r["backend"] == "exact"}
            out.append(f"\n## {b} vs exact, {mode} queries\n")
            out.append(f"| Scale | brute_acc | {b}_acc | gap | recall@{k} | agreement | {b} ms/q | exact ms/q "
                       f"| {b} build s | {b} B/entry | peak MB |")
            out.append("| --- " * 11 + "|")
            for r in sel:
                e = ex.get(r["scale"])
                exact_ms = f"{e['ms_per_query']:.2f}" if e else "n/a"
                out.append(f"| {scale_label(r['scale'])} | {r['brute_acc']:.3f} | {r['acc']:.3f} | {r['gap']:+.3f} "
                           f"| {r[f'recall@{k}']:.3f} | {r['agreement']:.3f} | {r['ms_per_query']:.2f} | {exact_ms} "
                           f"| {r['build_s']:.1f} | {r['index_bytes_per_entry']:.0f} | {r['peak_rss_mb']:.0f} |")
    out.append("\n## Paper 6.5 (for comparison)\n")
    out.append("| Scale | brute_acc | hnsw_acc | gap | recall@5 | agreement | hnsw ms/q |")
    out.append("| --- " * 7 + "|")
    for n, p in PAPER.items():
        out.append(f"| {scale_label(n)} | {p['brute_acc']:.3f} | {p['hnsw_acc']:.3f} | {p['gap']:+.3f} "
                   f"| {p['recall']:.3f} | {p['agreement']:.3f} | {p['ms']:.2f} |")
    if notes:
        out.append("\n## Notes\n")
        out.extend(f"- {n}" for n in notes)
    return "\n".join(out) + "\n"


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
    fig.suptitle(f"synthetic class-incremental, {cfg.n_classes} classes, dim {cfg.dim}, sigma {cfg.sigma}")
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_suffix(f".{ext}")
        fig.savefig(p, dpi=120)
        paths.append(p)
    return paths


def read_csv(path: Path) -> list[dict]:
    """Rows of a scale.csv, numbers parsed back."""
    from ocrr.systems.registry import parse_value

    with open(path, newline="") as f:
        return [{k: parse_value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def write_outputs(rows: list[dict], cfg: ScaleConfig, out: Path, notes: list[str] = ()) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "scale.csv", "md": out / "scale.md"}
    write_csv(rows, paths["csv"])
    paths["md"].write_text(markdown(rows, cfg, notes))
    png, svg = figure(rows, cfg, out / "scale_recall_accuracy")
    paths.update(png=png, svg=svg)
    import json

    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=list))
    paths["config"] = out / "config.json"
    return paths


if __name__ == "__main__":  # the per-scale worker of run_study(isolate=True)
    import sys

    _child_main(sys.argv[1:])
