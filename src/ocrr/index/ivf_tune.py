"""Choose an IVF index's ``nprobe`` and re-rank depth for a target recall@k.

The sample: ``n_queries`` live entries drawn with a seeded generator, each queried with
its own vector and left out of its own answer (leave-one-out: neighbours 2..k+1 of the
exact and approximate lists), so a stored vector stands in for a new item from the same
distribution and nothing is tested on the entry it is. Ground truth is one exact scan
(``ocrr.index.exact_search``) of the float32 rows.

Candidates: ``nprobe`` 1, 2, 4, ... (up to the list count, or 1/32 of it when that is
over 64: at 10M entries 256 lists already mean 300k codes per query), each searched once at the
deepest re-rank; every shallower depth (k+1, 2k, 4k, ... up to ``max_rerank``) is scored
on a prefix of the same candidate list. Each setting gets a cost -- the bytes a query
touches: centroids scanned, list codes scanned (``nprobe`` x mean list length x code
size) and float32 rows re-ranked -- a deterministic stand-in for time, so the same seed
picks the same setting on a busy or an idle machine. FAISS's ``OperatingPoints`` keeps
the Pareto frontier of (recall bound, cost), the bound being the sample's mean recall
minus two standard errors of it (so that another sample from the same ledger most likely
meets the target too); the pick is the frontier's cheapest point whose bound reaches the
target or, when none does, its highest point (logged as a warning).
The search stops one doubling of ``nprobe`` after the target is first reached.
"""

from __future__ import annotations

import logging

import numpy as np

from ocrr.index.exact import exact_search
from ocrr.index.recall import recall_at_k
from ocrr.index.rerank import rerank

MAX_RERANK = 1024
log = logging.getLogger("ocrr.index")


def drop_self(ids: np.ndarray, self_ids: np.ndarray, k: int) -> np.ndarray:
    """Each row without its own id, first k kept (-1 pads a row that had no self)."""
    drop = ids == self_ids[:, None]
    order = np.argsort(drop, axis=1, kind="stable")[:, :k]  # kept columns first, in their order
    out = np.take_along_axis(ids, order, axis=1)
    return np.where(np.take_along_axis(drop, order, axis=1), -1, out)


def tune_ivf(index, target_recall: float, k: int, n_queries: int = 200, seed: int = 0,
             max_rerank: int = MAX_RERANK, sample=None) -> dict:
    """The pick and every point tried (see the module docstring). ``sample``: (ids,
    vectors, exact top-(k+1) ids including each query itself), when the caller has them."""
    import faiss

    matrix = index._matrix()
    live_rows = np.flatnonzero(index._alive[: index._rows])
    row_ids = None if index.borrowed else index._row_ids
    n = len(live_rows)
    if n <= k + 1:
        return {"nprobe": index.nprobe, "rerank": index.rerank, "recall": 1.0, "target": target_recall,
                "met": True, "k": k, "n_queries": 0, "points": []}
    if sample is None:
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1F0E]))
        pick = np.sort(rng.choice(n, size=min(n_queries, n), replace=False))
        q_rows = live_rows[pick]
        queries = np.asarray(matrix[q_rows], np.float32)
        self_ids = q_rows if row_ids is None else row_ids[q_rows]
        everything = len(live_rows) == index._rows
        _, truth_rows = exact_search(matrix[: index._rows], queries, k + 1, rows=None if everything else live_rows)
        truth_ids = truth_rows if row_ids is None else row_ids[truth_rows]
    else:
        self_ids, queries, truth_ids = (np.asarray(a) for a in sample)
        queries = np.ascontiguousarray(queries, np.float32)
    pick = self_ids
    truth = drop_self(np.asarray(truth_ids, np.int64), np.asarray(self_ids, np.int64), k)

    depths = sorted({min(max_rerank, max(k + 1, k * 2 ** j)) for j in range(12)})
    mean_list = n / index.nlist
    code_bytes = {"ivf": 4 * index.dim, "ivf_sq8": index.dim, "ivf_pq": index.pq_m / 2}[index.kind]
    hnsw_q = isinstance(faiss.downcast_index(index._index.quantizer), faiss.IndexHNSWFlat)
    ops = faiss.OperatingPoints()
    points, best_at_max, reached, nprobe = [], 0.0, None, 1
    max_nprobe = min(index.nlist, max(64, index.nlist // 32))  # beyond 1/32 of the lists a scan is no longer "fast"
    while nprobe <= max_nprobe:
        cand = index.candidates(queries, depths[-1] + 1, nprobe=nprobe)
        coarse = (max(2 * nprobe, 32) * 32 if hnsw_q else index.nlist) * index.dim * 4
        for depth in depths:
            _, got = rerank(queries, cand[:, : depth + 1], matrix, row_ids, k + 1)
            per = recall_at_k(drop_self(got, self_ids, k), truth, per_query=True)
            recall = float(per.mean())
            bound = recall - 2 * float(per.std()) / np.sqrt(len(per))  # what a new sample will most likely beat
            cost = coarse + nprobe * mean_list * code_bytes + depth * index.dim * 4
            points.append({"nprobe": nprobe, "rerank": depth, "recall": recall, "recall_bound": bound,
                           "cost_bytes": cost})
            ops.add(bound, cost, f"{nprobe},{depth}")
            best_at_max = bound
        if reached is None and best_at_max >= target_recall:
            reached = nprobe
        elif reached is not None:
            break
        nprobe *= 2
    frontier = [ops.optimal_pts.at(i) for i in range(ops.optimal_pts.size())]
    ok = [p for p in frontier if p.perf >= target_recall]
    chosen = min(ok, key=lambda p: p.t) if ok else max(frontier, key=lambda p: (p.perf, -p.t))
    p_nprobe, p_depth = (int(v) for v in chosen.key.split(","))
    met = bool(ok)
    recall = next(p["recall"] for p in points if (p["nprobe"], p["rerank"]) == (p_nprobe, p_depth))
    if not met:
        log.warning("%s index: no setting reached recall@%d %.3f on %d held-out entries (best %.3f, lower bound "
                    "%.3f, at nprobe=%d, rerank=%d)", index.kind, k, target_recall, len(pick), recall, chosen.perf,
                    p_nprobe, p_depth)
    return {"nprobe": p_nprobe, "rerank": p_depth, "recall": recall, "recall_bound": float(chosen.perf),
            "target": target_recall,
            "met": met, "k": k, "n_queries": int(len(pick)), "entries": int(n), "nlist": int(index.nlist),
            "cost_bytes": float(chosen.t), "points": points}
