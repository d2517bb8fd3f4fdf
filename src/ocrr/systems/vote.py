"""The substrate's vote over retrieved neighbours, and its ablations (paper sections 4.3, 5.6).

Full rule: keep the neighbours whose similarity is within ``margin`` of the top hit
(the margin band), count them per label, and take the label with the largest count;
ties go to the label with the higher maximum similarity, then to the label whose
band neighbour is the most recent entry (largest id). Ablations switch pieces off.
A tie that every enabled key leaves open goes to the label that sorts first, so the
answer is always deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VoteRule:
    k: int = 5
    margin: float | None = 0.05  # None: no band, every retrieved neighbour votes
    weighting: str = "count"  # "count" or "sumsim" (sum of similarities)
    tiebreak_maxsim: bool = True
    tiebreak_recency: bool = True

    def __post_init__(self):
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if self.weighting not in ("count", "sumsim"):
            raise ValueError("weighting must be 'count' or 'sumsim'")


def vote(sims: np.ndarray, nbr_ids: np.ndarray, nbr_labels: np.ndarray, rule: VoteRule) -> np.ndarray:
    """Vote each row's neighbours; return the winning label index per row (-1: no neighbours).

    sims, nbr_ids, nbr_labels: (n, k) arrays, rows sorted by similarity descending.
    nbr_labels holds label indices (order of the sorted label list), -1 for padding.
    """
    n, k = sims.shape
    if k == 0:
        return np.full(n, -1, np.int64)
    sims = sims.astype(np.float64)
    valid = nbr_labels >= 0
    if rule.margin is None:
        voting = valid
    else:
        top = np.max(np.where(valid, sims, -np.inf), axis=1, keepdims=True)
        voting = valid & (sims >= top - rule.margin)
    # same[i, a, b]: neighbour b votes for the label of neighbour a.
    same = (nbr_labels[:, :, None] == nbr_labels[:, None, :]) & voting[:, None, :]
    if rule.weighting == "count":
        score = same.sum(axis=2).astype(np.float64)
    else:
        score = np.where(same, sims[:, None, :], 0.0).sum(axis=2)
    cand = _keep_best(voting, score)
    if rule.tiebreak_maxsim:
        cand = _keep_best(cand, np.where(same, sims[:, None, :], -np.inf).max(axis=2))
    if rule.tiebreak_recency:
        cand = _keep_best(cand, np.where(same, nbr_ids[:, None, :], -1).max(axis=2).astype(np.float64))
    winner = np.where(cand, nbr_labels, np.iinfo(np.int64).max).min(axis=1)
    return np.where(voting.any(axis=1), winner, -1).astype(np.int64)


def _keep_best(cand: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Among candidate neighbours, keep those whose label's key equals the row's best."""
    masked = np.where(cand, key, -np.inf)
    return cand & (masked == masked.max(axis=1, keepdims=True))


def vote_margin(sims: np.ndarray, nbr_labels: np.ndarray, winners: np.ndarray, rule: VoteRule) -> np.ndarray:
    """How decided each row's vote is: the winner's band votes minus the best other label's,
    plus 0.4 x the similarity gap between the winner's best neighbour and the best neighbour
    of any other label among all k (1 if there is none; the gap is at most 2, so it only orders
    rows with equal vote margins). Smaller: less sure. A row without neighbours scores 0."""
    n, k = sims.shape
    if k == 0:
        return np.zeros(n)
    sims = sims.astype(np.float64)
    valid = nbr_labels >= 0
    if rule.margin is None:
        voting = valid
    else:
        top = np.max(np.where(valid, sims, -np.inf), axis=1, keepdims=True)
        voting = valid & (sims >= top - rule.margin)
    mine = valid & (nbr_labels == winners[:, None])
    same = (nbr_labels[:, :, None] == nbr_labels[:, None, :]) & voting[:, None, :]
    counts = same.sum(axis=2)  # band votes of each neighbour's label
    votes = np.where(voting & mine, counts, 0).max(axis=1)
    others = np.where(voting & ~mine, counts, 0).max(axis=1)
    best_mine = np.where(mine, sims, -np.inf).max(axis=1)
    best_other = np.where(valid & ~mine, sims, -np.inf).max(axis=1)
    gap = np.where(np.isfinite(best_other) & np.isfinite(best_mine), best_mine - best_other, 1.0)
    return np.where(valid.any(axis=1), votes - others + 0.4 * gap, 0.0)
