"""Choose an IVF index's ``nprobe`` and re-rank depth for a target recall@k and/or a target
agreement of the substrate's vote with exact search.

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
picks the same setting on a busy or an idle machine.

Objectives, each judged by a lower bound, so that another sample from the same ledger
most likely meets the target too:

* ``target_recall``: recall@k; bound = the sample's mean minus two standard errors;
* ``target_agreement``: the fraction of sample queries whose vote over the IVF top-k
  (``ocrr.index.vote.vote`` with the substrate's rule, labels from ``label_of``) equals
  the vote over the exact top-k -- what the substrate actually decides. Agreement is a
  proportion that is often exactly 1 on the sample, where a standard error says nothing,
  so its bound is the Wilson score lower bound at z = 2 (all of 200 agreeing: 0.980; of
  1000: 0.996). A target t can only be certified with n_queries >= 4 t / (1 - t)
  (``min_queries_for``).

With both set, a point must meet both. The pick is the cheapest point that does; when
none does, the cheapest point whose bound (agreement's if set, else recall's) is within
``tolerance`` of the best bound found (``tolerance`` 0: the best point, as before), with a
logged warning. FAISS's ``OperatingPoints`` records the Pareto frontier of (bound, cost).
The search stops one doubling of ``nprobe`` after the deepest re-rank first meets every target.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from ocrr.index.exact import exact_search
from ocrr.index.kmeans import groups_to_probe
from ocrr.index.recall import recall_at_k
from ocrr.index.rerank import best_k, score_rows
from ocrr.index.vote import VoteRule, vote

MAX_RERANK = 1024
log = logging.getLogger("ocrr.index")


def drop_self(ids: np.ndarray, self_ids: np.ndarray, k: int) -> np.ndarray:
    """Each row without its own id, first k kept (-1 pads a row that had no self)."""
    drop = ids == self_ids[:, None]
    order = np.argsort(drop, axis=1, kind="stable")[:, :k]  # kept columns first, in their order
    out = np.take_along_axis(ids, order, axis=1)
    return np.where(np.take_along_axis(drop, order, axis=1), -1, out)


def wilson_lower(successes: np.ndarray | float, n: int, z: float = 2.0) -> float:
    """Wilson score lower bound of a proportion (successes out of n)."""
    if n == 0:
        return 0.0
    p = float(np.sum(successes)) / n if np.ndim(successes) else float(successes) / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return float((centre - spread) / (1 + z2 / n))


def min_queries_for(target_agreement: float, z: float = 2.0) -> int:
    """Fewest sample queries whose Wilson bound can reach ``target_agreement`` (all agreeing)."""
    if target_agreement >= 1:
        return 2**62
    return int(np.ceil(z * z * target_agreement / (1 - target_agreement) - 1e-9))


def drop_self_scored(sims: np.ndarray, ids: np.ndarray, self_ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``drop_self`` for (sims, ids) pairs: -inf / -1 pad a row that had no self."""
    drop = ids == self_ids[:, None]
    order = np.argsort(drop, axis=1, kind="stable")[:, :k]
    gone = np.take_along_axis(drop, order, axis=1)
    return (
        np.where(gone, -np.inf, np.take_along_axis(sims, order, axis=1)).astype(np.float32),
        np.where(gone, -1, np.take_along_axis(ids, order, axis=1)),
    )


def check_targets(
    target_recall: float, target_agreement: float, tolerance: float, n_queries: int, has_labels: bool
) -> None:
    """ValueError naming the fix for settings the tuner cannot honour."""
    if not 0 <= target_recall <= 1:
        raise ValueError(f"target_recall must be in [0, 1] (0: no recall target), got {target_recall}")
    if not 0 <= target_agreement < 1:
        raise ValueError(f"target_agreement must be in [0, 1) (0: no agreement target), got {target_agreement}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tune tolerance must be in [0, 1), got {tolerance}")
    if n_queries < 1:
        raise ValueError(f"tuning needs at least 1 sample query, got {n_queries}")
    if target_agreement > 0:
        if not has_labels:
            raise ValueError("target_agreement needs the entries' labels (label_of: ids -> label indices)")
        need = min_queries_for(target_agreement)
        if n_queries < need:
            raise ValueError(
                f"target_agreement {target_agreement} cannot be certified with {n_queries} tuning "
                f"queries (best possible lower bound {wilson_lower(n_queries, n_queries):.3f}); "
                f"use at least {need} tuning queries or a lower target"
            )


def tune_ivf(
    index: Any,  # an IVFIndex (which imports this module)
    target_recall: float,
    k: int,
    n_queries: int = 200,
    seed: int = 0,
    max_rerank: int = MAX_RERANK,
    sample: tuple | None = None,
    *,
    target_agreement: float = 0.0,
    label_of: Callable[[np.ndarray], np.ndarray] | None = None,
    rule: VoteRule | None = None,
    tolerance: float = 0.0,
) -> dict:
    """The pick and every point tried (see the module docstring). ``sample``: (ids,
    vectors, exact top-(k+1) ids including each query itself), when the caller has them.
    ``label_of``: ids -> label indices (needed for ``target_agreement``); ``rule``: the
    vote's ``VoteRule`` (default: the substrate's, with this k)."""
    import faiss

    check_targets(
        target_recall,
        target_agreement,
        tolerance,
        n_queries if sample is None else len(sample[0]),
        label_of is not None,
    )
    matrix = index._matrix()
    row_ids = None if index.borrowed else index._row_ids
    n = index._live  # (the live rows themselves, 8 bytes each, only when drawing the sample here)
    if n <= k + 1:
        return {
            "nprobe": index.nprobe,
            "rerank": index.rerank,
            "recall": 1.0,
            "target": target_recall,
            "target_agreement": target_agreement,
            "met": True,
            "k": k,
            "n_queries": 0,
            "points": [],
        }
    if sample is None:
        live_rows = np.flatnonzero(index._alive[: index._rows])
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
        truth_rows = truth_ids if row_ids is None else _rows_of(row_ids[: index._rows], truth_ids)
    self_ids = np.asarray(self_ids, np.int64)
    truth = drop_self(np.asarray(truth_ids, np.int64), self_ids, k)
    agreeing = target_agreement > 0 or label_of is not None
    if agreeing:
        assert label_of is not None  # (check_targets refused target_agreement without labels)
        rule = rule or VoteRule(k=k)

        def decide(sims: np.ndarray, ids: np.ndarray) -> np.ndarray:
            return vote(sims, ids, np.where(ids >= 0, label_of(np.maximum(ids, 0)), -1), rule)

        e_sims, e_ids = drop_self_scored(
            *best_k(*score_rows(queries, np.asarray(truth_rows, np.int64), matrix, row_ids), k + 1), self_ids, k
        )
        exact_vote = decide(e_sims, e_ids)

    depths = sorted({min(max_rerank, max(k + 1, k * 2**j)) for j in range(12)})
    mean_list = n / index.nlist
    code_bytes = {"ivf": 4 * index.dim, "ivf_sq8": index.dim, "ivf_pq": index.pq_m / 2}[index.kind]
    quantizer = faiss.downcast_index(index._index.quantizer)
    hnsw_q = isinstance(quantizer, faiss.IndexHNSWFlat)  # an index saved by an older version
    nested = quantizer.nlist if isinstance(quantizer, faiss.IndexIVFFlat) else 0  # groups of centroids
    primary = "agreement_bound" if target_agreement > 0 else "recall_bound"

    def meets(p: dict) -> bool:
        return (target_recall <= 0 or p["recall_bound"] >= target_recall) and (
            target_agreement <= 0 or p["agreement_bound"] >= target_agreement
        )

    ops = faiss.OperatingPoints()
    points, reached, nprobe = [], None, 1
    max_nprobe = min(index.nlist, max(64, index.nlist // 32))  # beyond 1/32 of the lists a scan is no longer "fast"
    while nprobe <= max_nprobe:
        cand = index.candidates(queries, depths[-1] + 1, nprobe=nprobe)
        all_sims, all_ids = score_rows(queries, cand, matrix, row_ids)  # each candidate row read once
        if nested:  # the group centres, then the centroids of the groups searched
            scanned = nested + groups_to_probe(nprobe, index.nlist, nested) * index.nlist / nested
        else:
            scanned = max(2 * nprobe, 32) * 32 if hnsw_q else index.nlist
        coarse = scanned * index.dim * 4
        for depth in depths:
            sims, got = drop_self_scored(*best_k(all_sims[:, : depth + 1], all_ids[:, : depth + 1], k + 1), self_ids, k)
            per = recall_at_k(got, truth, per_query=True)
            recall = float(per.mean())
            bound = recall - 2 * float(per.std()) / np.sqrt(len(per))  # what a new sample will most likely beat
            cost = coarse + nprobe * mean_list * code_bytes + depth * index.dim * 4
            point = {"nprobe": nprobe, "rerank": depth, "recall": recall, "recall_bound": bound, "cost_bytes": cost}
            if agreeing:
                same = decide(sims, got) == exact_vote
                point.update(agreement=float(same.mean()), agreement_bound=wilson_lower(same, len(same)))
            points.append(point)
            ops.add(point[primary], cost, f"{nprobe},{depth}")
        if reached is None and meets(points[-1]):
            reached = nprobe
        elif reached is not None:
            break
        nprobe *= 2
    ok = [p for p in points if meets(p)]
    best = max(p[primary] for p in points)
    if ok:
        chosen = min(ok, key=lambda p: (p["cost_bytes"], -p[primary]))
    else:  # the cheapest point within the tolerance of the best bound (tolerance 0: the best point)
        chosen = min(
            (p for p in points if p[primary] >= best - tolerance), key=lambda p: (p["cost_bytes"], -p[primary])
        )
    met = bool(ok)
    if not met:
        wanted = " and ".join(
            w
            for w in (
                f"recall@{k} {target_recall:.3f}" if target_recall > 0 else "",
                f"vote agreement {target_agreement:.3f}" if target_agreement > 0 else "",
            )
            if w
        )
        top = min((p for p in points if p[primary] == best), key=lambda p: p["cost_bytes"])
        log.warning(
            "%s index: no setting reached %s on %d held-out entries (best %s bound %.3f at nprobe=%d, "
            "rerank=%d); kept nprobe=%d, rerank=%d: the cheapest within tolerance %.3f of it (bound %.3f, "
            "recall %.3f, %.0f%% of the best point's cost)",
            index.kind,
            wanted,
            len(self_ids),
            primary.split("_")[0],
            best,
            top["nprobe"],
            top["rerank"],
            chosen["nprobe"],
            chosen["rerank"],
            tolerance,
            chosen[primary],
            chosen["recall"],
            100 * chosen["cost_bytes"] / top["cost_bytes"],
        )
    frontier = [ops.optimal_pts.at(i).key for i in range(ops.optimal_pts.size())]
    out = {
        "nprobe": chosen["nprobe"],
        "rerank": chosen["rerank"],
        "recall": chosen["recall"],
        "recall_bound": float(chosen["recall_bound"]),
        "target": target_recall,
        "target_agreement": target_agreement,
        "objective": primary.split("_")[0],
        "tolerance": tolerance,
        "met": met,
        "k": k,
        "n_queries": int(len(self_ids)),
        "entries": int(n),
        "nlist": int(index.nlist),
        "cost_bytes": float(chosen["cost_bytes"]),
        "frontier": frontier,
        "points": points,
    }
    if agreeing:
        out.update(agreement=chosen["agreement"], agreement_bound=chosen["agreement_bound"])
    return out


def _rows_of(row_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Owned-mode row numbers of ``ids`` (-1 stays -1)."""
    order = np.argsort(row_ids, kind="stable")
    pos = np.searchsorted(row_ids, np.maximum(ids, 0), sorter=order)
    return np.where(ids >= 0, order[np.minimum(pos, len(order) - 1)], -1)
