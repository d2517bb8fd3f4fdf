"""The scale study (paper 6.5): exact vs approximate retrieval under the substrate's vote.

Synthetic class-incremental data (``ocrr.studies.scale.data``): ``family="gaussian"``, random
unit centroids in ``dim`` dimensions and an entry of class c is ``centroid_c +
N(0, sigma^2 I)``, L2-normalised; ``family="subspace"``, the same inside a random
``intrinsic_dim``-dimensional subspace plus a little ambient noise. Entries arrive class
by class (ids 0.. in class order), as a class-incremental stream would append them to
the ledger. At each scale N the study

1. streams the N entries in chunks (generated from per-block seeds, so any chunk can be
   regenerated and 10M x 384 float32 = 15.4 GB never has to be in memory at once),
2. computes the exact top-k of every query by brute force over the chunks (the ground
   truth; ``ocrr.index.exact_search`` semantics, merged with ``top_k``),
3. adds the chunks to each approximate backend (``hnsw`` by default; ``hnsw_sq8``,
   ``exact_sq8``, ``ivf``, ``ivf_sq8``, ``ivf_pq`` on request; the IVF kinds are built
   and tuned as ``ocrr.studies.scale.ivf`` describes) in stream order (``order="class"``; ``"shuffled"`` inserts
   the same entries, same ids, in a random order -- HNSW graphs are sensitive to it)
   and, when it fits (``exact="auto"``: N x dim x 4 bytes <=
   ``exact_max_gb``), keeps the vectors in one array read by an ``ExactIndex`` in
   borrowed mode -- the unbounded substrate's exact path, whose query time is reported,
4. answers the queries with each backend and applies the substrate's vote
   (``ocrr.index.vote.vote`` with the substrate's default ``VoteRule``: k=5,
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
numpy and FAISS and the transient chunk buffers, not just the index; the CSV
also has the sampled peaks of anonymous and file-backed resident memory separately, and
both at each phase (``ocrr.studies.scale.memory`` says what each means). With ``cold_queries``
the IVF kinds are also timed right after the vector file left the page cache, and the first
query after opening the saved index is timed in fresh processes (``ocrr.studies.scale.reopen``).
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ocrr.index import IVF_KINDS, AutoIndex, CertifiedSQ8Index, FaissIndex, IVFIndex, make_index, recall_at_k, top_k
from ocrr.index.exact import ExactIndex
from ocrr.index.vote import VoteRule, vote
from ocrr.studies.scale.config import DEFAULT_SCALES, ScaleConfig
from ocrr.studies.scale.data import BLOCK, CHUNK_ROWS, FAMILIES, SubspaceStream, SyntheticStream, make_stream
from ocrr.studies.scale.ivf import IVFBuild, VectorStore, time_cold_queries
from ocrr.studies.scale.memory import MemorySampler, ledger_bytes_per_entry, proc_status_mb
from ocrr.studies.scale.reopen import time_first_query_after_open
from ocrr.studies.scale.report import PAPER, figure, markdown, read_csv, scale_label, write_csv, write_outputs
from ocrr.studies.scale.timing import time_queries
from ocrr.utils.heap import map_allocations_from, release_free_heap

__all__ = [
    "BLOCK",
    "CHUNK_ROWS",
    "DEFAULT_SCALES",
    "FAMILIES",
    "PAPER",
    "ScaleConfig",
    "SubspaceStream",
    "SyntheticStream",
    "figure",
    "ledger_bytes_per_entry",
    "make_stream",
    "markdown",
    "read_csv",
    "run_scale",
    "run_study",
    "scale_label",
    "write_csv",
    "write_outputs",
]


# -- one scale ---------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _predict(stream: SyntheticStream, sims: np.ndarray, ids: np.ndarray, rule: VoteRule) -> np.ndarray:
    labels = np.where(ids >= 0, stream.labels_of(np.maximum(ids, 0)), -1)
    return vote(sims, ids, labels, rule)


def _add_all(backends: dict, x: np.ndarray, ids: np.ndarray, first_chunk: bool, build_s: dict, build_cpu: dict) -> None:
    for name, index in backends.items():
        t0, c0 = time.perf_counter(), time.process_time()
        if getattr(index, "compressed", False) and first_chunk:
            index.train(x)  # the 8-bit quantiser sees the head of the stream (the first chunk), as in a deployment
        index.add(x, ids)
        build_s[name] += time.perf_counter() - t0
        build_cpu[name] += time.process_time() - c0


def _band_size(sims: np.ndarray, ids: np.ndarray, margin: float | None) -> float:
    """Mean number of retrieved neighbours inside the vote's margin band (no margin: every
    retrieved neighbour votes, as in ``ocrr.index.vote.band``)."""
    valid = ids >= 0
    if margin is None:
        return float(valid.sum(axis=1).mean())
    top = np.max(np.where(valid, sims, -np.inf), axis=1, keepdims=True)
    return float((valid & (sims >= top - margin)).sum(axis=1).mean())


def run_scale(n: int, cfg: ScaleConfig) -> list[dict]:
    """Build, query and score every backend at one scale; one row per (backend, query set)."""
    import faiss

    faiss.omp_set_num_threads(cfg.threads)
    with threadpool_limits(cfg.threads), MemorySampler() as memory:
        rows = _run_scale(n, cfg, memory)
    for row in rows:
        row.update(memory.fields())
    return rows


_proc_status_mb = proc_status_mb
_time_queries = time_queries  # the name benchmarks/bench_index.py imports


def _say(started: float, n: int, msg: str) -> None:
    print(f"[scale {scale_label(n)} +{time.perf_counter() - started:.0f}s] {msg}", file=sys.stderr, flush=True)


def _run_scale(n: int, cfg: ScaleConfig, memory: MemorySampler) -> list[dict]:
    rss_start = _peak_rss_mb()
    started = time.perf_counter()
    stream = make_stream(cfg.family, n, cfg.n_classes, cfg.dim, cfg.sigma, cfg.seed, cfg.intrinsic_dim, cfg.ambient)
    rule = VoteRule(k=cfg.k)  # the substrate's default rule
    qsets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]] = {}  # queries, labels, stored ids
    if "fresh" in cfg.query_modes:
        q, lab = stream.fresh_queries(cfg.n_queries)
        qsets["fresh"] = (q, lab, None)
    if "stored" in cfg.query_modes:
        qsets["stored"] = stream.stored_queries(cfg.n_queries)  # queries, labels, their ids
    depth = {m: cfg.k for m in qsets}
    ivf_kinds = [b for b in cfg.backends if b in IVF_KINDS]
    tuning = ivf_kinds and (cfg.target_recall > 0 or cfg.target_agreement > 0)
    if tuning:  # held-out stored entries for the IVF tuning: exact top-(k+1), each includes itself
        size = min(cfg.tune_queries or cfg.n_queries, n)
        tune_ids = np.sort(np.random.default_rng([cfg.seed, 6]).choice(n, size=size, replace=False))
        qsets["tune"] = (stream.rows(tune_ids), stream.labels_of(tune_ids), tune_ids)
        depth["tune"] = cfg.k + 1
    truth = {m: (np.empty((len(q), 0), np.float32), np.empty((len(q), 0), np.int64)) for m, (q, _, _) in qsets.items()}

    params = dict(m=cfg.hnsw_m, ef_construction=cfg.ef_construction, ef_search=cfg.ef_search, **cfg.index_params)
    backends = {name: make_index(name, cfg.dim, **params) for name in cfg.backends if name not in IVF_KINDS}
    build_s = dict.fromkeys(backends, 0.0)
    build_cpu = dict.fromkeys(backends, 0.0)  # process CPU time (all threads) of the adds
    keep = cfg.keep_exact(n)
    vstore = VectorStore(n, cfg.dim, in_memory=keep, folder=cfg.vectors_dir) if keep or ivf_kinds else None
    store: np.ndarray | None = None
    exact: ExactIndex | None = None
    if keep:
        assert vstore is not None and isinstance(vstore.array, np.ndarray)  # kept: in RAM
        store = vstore.array
        # borrowed: the substrate's exact path, timed as the float32 scan it is measured
        # against (no float16 copy beside millions of rows; bench_substrate.py times that)
        exact = ExactIndex(cfg.dim, source=lambda: store, shortlist=False)
    ivf: IVFBuild | None = None
    if ivf_kinds:
        assert vstore is not None  # made for the IVF kinds' re-rank
        ivf = IVFBuild(ivf_kinds, n, cfg.dim, vstore, cfg.nlist, cfg.nprobe, cfg.rerank, cfg.train_per_list, cfg.seed)
    if keep:
        build_s["exact"] = build_cpu["exact"] = 0.0
    gen_s = gt_s = 0.0

    t_gen = time.perf_counter()
    for first, x in stream.chunks():
        ids = np.arange(first, first + len(x), dtype=np.int64)
        gen_s += time.perf_counter() - t_gen
        t0 = time.perf_counter()
        for m, (q, _, _) in qsets.items():
            s, i = top_k(q @ x.T, ids, depth[m])
            ts, ti = truth[m]
            truth[m] = top_k(np.concatenate([ts, s], axis=1), np.concatenate([ti, i], axis=1), depth[m])
        gt_s += time.perf_counter() - t0
        if vstore is not None:
            vstore.write(first, x)  # the ledger append, not timed as index build
        if ivf is not None:
            ivf.collect(first, x)
        if exact is not None:  # kept
            t0, c0 = time.perf_counter(), time.process_time()
            exact.add(x, ids)
            build_s["exact"] += time.perf_counter() - t0
            build_cpu["exact"] += time.process_time() - c0
        if cfg.order == "class":
            _add_all(backends, x, ids, first == 0, build_s, build_cpu)
        if (first // CHUNK_ROWS) % 16 == 0:
            _say(started, n, f"first pass {first + len(x):,}/{n:,}")
        t_gen = time.perf_counter()
    del x
    if cfg.order == "shuffled":  # same entries and ids, inserted into the backends in a random order
        perm = np.random.default_rng([cfg.seed, 4]).permutation(n)
        for lo in range(0, n, CHUNK_ROWS):
            ids = np.sort(perm[lo : lo + CHUNK_ROWS])
            x = store[ids] if store is not None else stream.rows(ids)
            _add_all(backends, x, ids, lo == 0, build_s, build_cpu)
    tuned: dict[str, dict] = {}
    release_free_heap()  # the ground truth's score blocks: freed, but resident in the heap
    anon = [_proc_status_mb().get("RssAnon", math.nan)]  # sampled after each phase
    memory.mark("first_pass")
    if ivf is not None:
        _say(started, n, f"first pass done; IVF: k-means ({ivf.nlist} lists) and adds")
        ivf.finish(progress=lambda msg: _say(started, n, msg))
        memory.mark("built")
        anon.append(_proc_status_mb().get("RssAnon", math.nan))
        for kind in ivf_kinds:
            backends[kind] = ivf.indexes[kind]
            build_s[kind], build_cpu[kind] = ivf.build_seconds(kind), ivf.build_seconds(kind, cpu=True)
            if tuning:
                tq, _, tids = qsets["tune"]
                tuned[kind] = ivf.tune(
                    kind,
                    cfg.target_recall,
                    cfg.k,
                    (tids, tq, truth["tune"][1]),
                    cfg.target_agreement,
                    stream.labels_of,
                    cfg.tune_tolerance,
                )
                _say(
                    started,
                    n,
                    f"{kind}: tuned nprobe {tuned[kind]['nprobe']}, rerank {tuned[kind]['rerank']}, "
                    f"recall {tuned[kind]['recall']:.3f}, agreement "
                    f"{tuned[kind].get('agreement', math.nan):.3f} in {tuned[kind]['tune_s']:.0f} s",
                )
        qsets.pop("tune", None)
        memory.mark("tuned")

    timed = dict(backends)
    if exact is not None:  # kept
        assert exact.borrowed  # no second copy of the vectors
        timed = {"exact": exact, **backends}
    plan: list[tuple[str, ExactIndex | CertifiedSQ8Index | FaissIndex | IVFIndex | AutoIndex, tuple[int, int] | None]]
    plan = [(name, index, None) for name, index in timed.items()]
    plan += [(kind, backends[kind], tuple(setting)) for kind in ivf_kinds for setting in cfg.also_time]
    rows = []
    for name, index, setting in plan:
        if setting:  # the same index at another setting, for the trade-off (the tuned one is restored below)
            assert isinstance(index, IVFIndex)  # settings are timed for the IVF kinds
            tuned_setting = (index.nprobe, index.rerank)
            index.nprobe, index.rerank = setting
        bytes_per_entry = index.nbytes / n
        for mode, (q, lab, qids) in qsets.items():
            t_s, t_i = truth[mode]
            exact_pred = _predict(stream, t_s, t_i, rule)
            timing = time_queries(index, q, cfg.k, cfg.threads)
            s, i = index.search(q, cfg.k)
            pred = _predict(stream, s, i, rule)
            row = {
                "scale": n,
                "backend": f"{name}@{setting[0]}/{setting[1]}" if setting else name,
                "queries": mode,
                "n_queries": len(q),
                "sigma": cfg.sigma,
                "dim": cfg.dim,
                "n_classes": cfg.n_classes,
                "k": cfg.k,
                "brute_acc": float(np.mean(exact_pred == lab)),
                "acc": float(np.mean(pred == lab)),
                "gap": float(np.mean(exact_pred == lab) - np.mean(pred == lab)),
                f"recall@{cfg.k}": recall_at_k(i, t_i),
                "agreement": float(np.mean(pred == exact_pred)),
                "top1_same": float(np.mean(i[:, 0] == t_i[:, 0])),
                **timing,
                "build_s": build_s[name],
                "build_cpu_s": build_cpu[name],
                "index_bytes_per_entry": bytes_per_entry,
                "store_bytes_per_entry": 4 * cfg.dim,
                "mean_top1_sim": float(t_s[:, 0].mean()),
                "band_size": _band_size(s, i, rule.margin),
                "exact_band_size": _band_size(t_s, t_i, rule.margin),
                "self_hit": float(np.mean(i[:, 0] == qids)) if qids is not None else math.nan,
                "hnsw_m": cfg.hnsw_m,
                "ef_construction": cfg.ef_construction,
                "ef_search": cfg.ef_search,
                "threads": cfg.threads,
                "order": cfg.order,
                "gen_s": gen_s,
                "ground_truth_s": gt_s,
            }
            if cfg.family != "gaussian":
                row.update(family=cfg.family, intrinsic_dim=cfg.intrinsic_dim, ambient=cfg.ambient)
            if name in IVF_KINDS:
                assert isinstance(index, IVFIndex) and ivf is not None  # built by IVFBuild
                t = tuned.get(name, {})
                row.update(
                    nlist=index.nlist,
                    nprobe=index.nprobe,
                    rerank=index.rerank,
                    target_recall=cfg.target_recall if t else 0.0,
                    tuned_recall=t.get("recall", math.nan),
                    target_agreement=cfg.target_agreement if t else 0.0,
                    tuned_agreement=t.get("agreement", math.nan),
                    tuned_agreement_bound=t.get("agreement_bound", math.nan),
                    tune_queries=t.get("n_queries", 0),
                    tune_tolerance=cfg.tune_tolerance,
                    target_met=t.get("met", ""),
                    tune_s=t.get("tune_s", math.nan),
                    kmeans_s=ivf.seconds["kmeans"],
                    assign_s=ivf.seconds["assign"],
                    train_codes_s=ivf.seconds[f"train {name}"],
                    add_s=ivf.seconds[f"add {name}"],
                    tuning_points=[] if setting else t.get("points", []),
                )
            rows.append(row)
        if setting:
            assert isinstance(index, IVFIndex)
            index.nprobe, index.rerank = tuned_setting
        _say(started, n, f"{name} scored" + (f" at nprobe {setting[0]}, rerank {setting[1]}" if setting else ""))
        anon.append(_proc_status_mb().get("RssAnon", math.nan))
    memory.mark("queried")
    if cfg.cold_queries and vstore is not None and not keep:  # last: it empties the page cache of the file
        for row in rows:
            if row["backend"] in IVF_KINDS:
                row.update(time_cold_queries(backends[row["backend"]], qsets[row["queries"]][0], cfg.k, vstore))
        for kind in ivf_kinds:  # a restart: the index saved, opened in fresh processes, first query timed
            assert vstore.path is not None  # on disk (not kept)
            _say(started, n, f"{kind}: first query after open (fresh processes)")
            q_first = next(iter(qsets.values()))[0]
            after_open = time_first_query_after_open(
                backends[kind], vstore.path, q_first, cfg.k, cfg.vectors_dir or tempfile.gettempdir()
            )
            for row in rows:
                if row["backend"] == kind:
                    row.update(after_open)
        memory.mark("cold")
    peak = _peak_rss_mb()
    mem = _proc_status_mb()
    for row in rows:
        row["peak_rss_mb"] = peak
        row["rss_at_start_mb"] = rss_start
        row["exact_in_memory"] = keep
        if ivf is not None:
            row["anon_rss_end_mb"] = mem.get("RssAnon", math.nan)
            row["anon_rss_max_sampled_mb"] = max(anon)
            row["file_rss_end_mb"] = mem.get("RssFile", math.nan)
    if vstore is not None:
        del store, exact, timed, backends
        if ivf is not None:
            ivf.indexes.clear()
        vstore.close()
    return rows


# -- the study --------------------------------------------------------------------------------
def run_study(
    cfg: ScaleConfig, isolate: bool = True, on_scale=None, out: Path | None = None, notes: Sequence[str] = ()
) -> list[dict]:
    """Every scale, each in a fresh Python process when ``isolate`` (so peak memory is per
    scale and one scale's allocations cannot inflate the next's). ``on_scale(n, rows)``
    hears each scale's rows; with ``out``, the outputs so far are written after every
    scale, so the scales done survive an interrupted long run."""
    rows: list[dict] = []
    for n in cfg.scales:
        got = _run_isolated(n, cfg) if isolate else run_scale(n, cfg)
        rows.extend(got)
        if on_scale:
            on_scale(n, got)
        if out is not None:
            write_outputs(rows, cfg, out, notes)
    return rows


def _run_isolated(n: int, cfg: ScaleConfig) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "ocrr.studies.scale.study", str(n), json.dumps(asdict(cfg))],
        stdout=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scale {n}: the worker process failed (exit {proc.returncode}); see its stderr above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child_main(argv: list[str]) -> None:
    n, raw = int(argv[0]), json.loads(argv[1])
    for key in ("scales", "backends", "query_modes"):
        raw[key] = tuple(raw[key])
    raw["also_time"] = tuple(tuple(x) for x in raw.get("also_time", ()))
    # This process is the scale's own. FAISS's inverted lists grow by doubling; mapped, the
    # copies they outgrow leave no holes in the heap (ocrr.utils.heap; docs/scale/ivf.md has
    # what it saved at 4M entries).
    map_allocations_from(64 << 10)
    print(json.dumps(run_scale(n, ScaleConfig(**raw))))


if __name__ == "__main__":  # the per-scale worker of run_study(isolate=True)
    _child_main(sys.argv[1:])
