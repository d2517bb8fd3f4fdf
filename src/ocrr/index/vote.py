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

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError("k must be at least 1")
        if self.weighting not in ("count", "sumsim"):
            raise ValueError("weighting must be 'count' or 'sumsim'")


def band(
    sims: np.ndarray, nbr_labels: np.ndarray, margin: float | None, anchors: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(similarities as float64, real neighbours (label >= 0), neighbours in the margin band)
    per row. The band reaches ``margin`` below the top similarity, or below the best of the
    ``anchors`` (a mask) where a row has one; no margin: every real neighbour is in it."""
    sims = sims.astype(np.float64)
    valid = nbr_labels >= 0
    if margin is None:
        return sims, valid, valid
    top = np.max(np.where(valid, sims, -np.inf), axis=1, keepdims=True)
    if anchors is not None:
        anchor = np.where(valid & anchors, sims, -np.inf).max(axis=1, keepdims=True)
        top = np.where(np.isfinite(anchor), anchor, top)
    return sims, valid, valid & (sims >= top - margin)


def vote(sims: np.ndarray, nbr_ids: np.ndarray, nbr_labels: np.ndarray, rule: VoteRule) -> np.ndarray:
    """Vote each row's neighbours; return the winning label index per row (-1: no neighbours).

    sims, nbr_ids, nbr_labels: (n, k) arrays, rows sorted by similarity descending.
    nbr_labels holds label indices (order of the sorted label list), -1 for padding.
    """
    n, k = sims.shape
    if k == 0:
        return np.full(n, -1, np.int64)
    sims, _, voting = band(sims, nbr_labels, rule.margin)
    # same[i, a, b]: neighbour b votes for the label of neighbour a.
    same = (nbr_labels[:, :, None] == nbr_labels[:, None, :]) & voting[:, None, :]
    if rule.weighting == "count":
        score = same.sum(axis=2).astype(np.float64)
    else:
        score = np.where(same, sims[:, None, :], 0.0).sum(axis=2)
    return elect(score, same, voting, sims, nbr_ids, nbr_labels, rule)


def elect(
    score: np.ndarray,
    same: np.ndarray,
    voting: np.ndarray,
    sims: np.ndarray,
    nbr_ids: np.ndarray,
    nbr_labels: np.ndarray,
    rule: VoteRule,
) -> np.ndarray:
    """Each row's winning label index (-1: no neighbour votes) from ``score[i, a]``, the votes
    for neighbour a's label; ties by the rule's keys (top similarity, then the latest id),
    then the label that sorts first. ``same[i, a, b]``: neighbour b votes for a's label;
    ``voting``: the neighbours in the band (``band``); all (n, k) but ``same``."""
    cand = keep_best(voting, score)
    if rule.tiebreak_maxsim:
        cand = keep_best(cand, np.where(same, sims[:, None, :], -np.inf).max(axis=2))
    if rule.tiebreak_recency:
        cand = keep_best(cand, np.where(same, nbr_ids[:, None, :], -1).max(axis=2).astype(np.float64))
    winner = np.where(cand, nbr_labels, np.iinfo(np.int64).max).min(axis=1)
    return np.where(voting.any(axis=1), winner, -1).astype(np.int64)


def vote_rows(sims: np.ndarray, nbr_ids: np.ndarray, nbr_labels: np.ndarray, rule: VoteRule) -> np.ndarray:
    """``vote``, row by row in plain Python: the same winners (tests check it against
    ``vote``), several times faster for the few rows of a served predict, where ``vote``'s
    dozen array operations cost more in call overhead than in work. The ``sumsim`` weighting
    (a float sum whose rounding follows numpy's order) goes to ``vote``."""
    if rule.weighting != "count" or sims.shape[1] == 0:
        return vote(sims, nbr_ids, nbr_labels, rule)
    # float32 -> Python float is exact, as ``band``'s float64 is
    return np.array(
        [_vote_row(s, i, lab, rule) for s, i, lab in zip(sims.tolist(), nbr_ids.tolist(), nbr_labels.tolist())],
        np.int64,
    )


def vote_one(sims: np.ndarray, nbr_ids: np.ndarray, nbr_labels: np.ndarray, rule: VoteRule) -> int:
    """``vote_rows`` for one row of (k,) arrays, the winner as an int: a served predict's vote.
    The ``count`` weighting only (``vote_rows`` sends ``sumsim`` to ``vote``)."""
    if rule.weighting != "count":
        raise ValueError("vote_one counts votes; the sumsim weighting goes to vote")
    return _vote_row(sims.tolist(), nbr_ids.tolist(), nbr_labels.tolist(), rule) if len(sims) else -1


def _vote_row(sims: list[float], ids: list[int], labels: list[int], rule: VoteRule) -> int:
    floor = None
    if rule.margin is not None:
        real = [s for s, label in zip(sims, labels) if label >= 0]
        if not real:
            return -1
        floor = max(real) - rule.margin  # the band, as ``band`` computes it
    per_label: dict[int, list] = {}  # label -> [votes, its best similarity, its latest id]
    for s, i, label in zip(sims, ids, labels):
        if label < 0 or (floor is not None and not s >= floor):
            continue
        got = per_label.get(label)
        if got is None:
            per_label[label] = [1, s, i]
        else:
            got[0] += 1
            got[1] = max(got[1], s)
            got[2] = max(got[2], i)
    if not per_label:
        return -1
    maxsim, recency = rule.tiebreak_maxsim, rule.tiebreak_recency

    def rank(label: int) -> tuple:  # ``vote``'s keys in order, then the label that sorts first
        votes, best, latest = per_label[label]
        return votes, best if maxsim else 0.0, latest if recency else 0, -label

    return max(per_label, key=rank)


def keep_best(cand: np.ndarray, key: np.ndarray) -> np.ndarray:
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
    sims, valid, voting = band(sims, nbr_labels, rule.margin)
    mine = valid & (nbr_labels == winners[:, None])
    same = (nbr_labels[:, :, None] == nbr_labels[:, None, :]) & voting[:, None, :]
    counts = same.sum(axis=2)  # band votes of each neighbour's label
    votes = np.where(voting & mine, counts, 0).max(axis=1)
    others = np.where(voting & ~mine, counts, 0).max(axis=1)
    best_mine = np.where(mine, sims, -np.inf).max(axis=1)
    best_other = np.where(valid & ~mine, sims, -np.inf).max(axis=1)
    gap = np.where(np.isfinite(best_other) & np.isfinite(best_mine), best_mine - best_other, 1.0)
    return np.where(valid.any(axis=1), votes - others + 0.4 * gap, 0.0)
