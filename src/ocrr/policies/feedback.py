"""Realistic feedback: noisy labels, late corrections, and a budget of reveals.

``Feedback`` is what the runner asks at correction time. Every random draw depends on the run
seed and the stream position alone (``np.random.SeedSequence([seed, crc32(key)])``, one key
per concern), so every system of a run meets the same noise, the same delays and the same
random scores, as it meets the same policy coins:

* noise: position i's revealed label is wrong when ``u_i < rate`` (so noise 0.1's flips are a
  subset of noise 0.3's); the wrong label is drawn uniformly from the other labels of the
  dataset (one draw per position, the same at every rate), or is the *confusable* one: the
  seed-set class whose centroid (mean of its unit vectors, renormalised) has the highest cosine
  with the item's vector, its own class excluded;
* delay: a correction made at stream time t (items predicted so far) arrives at t + d_i,
  d_i = the fixed delay, or a geometric draw on {0, 1, ...} with the given mean; corrections
  are delivered in arrival order (ties: stream order), each when its time has come, never before;
  those still in flight when the stream ends are never delivered;
* budget: of the reveals the base policy would make (its candidates), a ``BudgetSelector``
  makes a fraction, ranking candidates by a score: the system's uncertainty, or a seeded uniform
  draw per position for the random choice at the same budget.
"""

from __future__ import annotations

import heapq
import zlib
from collections import deque

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.policies.basic import Policy


def draws(seed: int, key: bytes, n: int) -> np.ndarray:
    """n uniform numbers in [0, 1) for stream positions 0..n-1, from the seed and the key alone."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(key)])).random(n)


def confusable_labels(seed_set: Batch, vecs: np.ndarray, labels) -> list[str]:
    """Per item: the seed-set class whose centroid is nearest the item (cosine), its own class excluded."""
    seed_labels = np.asarray(seed_set.labels, dtype=object)
    classes = sorted(set(seed_labels.tolist()))
    if len(classes) < 2:
        raise OcrrError("noise=<rate>:confusable needs at least two classes in the seed set; use noise=<rate>:uniform.")
    seed_vecs = np.asarray(seed_set.vecs, np.float64)
    centroids = np.stack([seed_vecs[seed_labels == c].mean(axis=0) for c in classes])
    centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    sims = np.asarray(vecs, np.float64) @ centroids.T
    own = np.array([classes.index(label) if label in classes else -1 for label in labels])
    rows = np.flatnonzero(own >= 0)
    sims[rows, own[rows]] = -np.inf
    return [classes[j] for j in np.argmax(sims, axis=1)]  # first maximum: the class that sorts first


def uniform_wrong_labels(u: np.ndarray, labels, all_labels) -> list[str]:
    """Per item: the other label number floor(u_i * (L - 1)) of the sorted list without its own."""
    ordered = sorted(all_labels)
    if len(ordered) < 2:
        raise OcrrError("noise needs at least two labels in the dataset.")
    where = {label: i for i, label in enumerate(ordered)}
    out = []
    for ui, label in zip(u, labels):
        j = min(int(ui * (len(ordered) - 1)), len(ordered) - 2)
        out.append(ordered[j + 1 if label in where and j >= where[label] else j])
    return out


class BudgetSelector:
    """Make a fraction f of the candidate reveals, the most uncertain ones, online.

    Candidate number e (1-based, in stream order) with score s is taken when the budget allows
    it -- taken so far + 1 <= f * e, so the share taken never exceeds f -- and s is at least the
    (1 - f) quantile of the scores of the ``window`` candidates before it (the first is taken
    when affordable). Unspent budget carries over, so on a long stream the share taken comes
    close to f (tests measure how close).
    """

    def __init__(self, fraction: float, window: int = 100):
        self.fraction = fraction
        self.recent: deque = deque(maxlen=window)
        self.seen = 0
        self.taken = 0

    def offer(self, score: float) -> bool:
        self.seen += 1
        affordable = self.taken + 1 <= self.fraction * self.seen + 1e-9
        take = affordable and (not self.recent or score >= np.quantile(self.recent, 1.0 - self.fraction))
        self.recent.append(float(score))
        self.taken += take
        return bool(take)


class DeliveryQueue:
    """Corrections in flight: (arrival time, stream position), popped in that order."""

    def __init__(self):
        self.heap: list[tuple[float, int]] = []

    def push(self, position: int, arrival: float) -> None:
        heapq.heappush(self.heap, (arrival, position))

    def due(self, now: int) -> list[int]:
        """Positions whose arrival time is <= now, in arrival order (ties: stream order)."""
        out = []
        while self.heap and self.heap[0][0] <= now:
            out.append(heapq.heappop(self.heap)[1])
        return out

    def __len__(self) -> int:
        return len(self.heap)


def system_uncertainty(system, batch: Batch) -> np.ndarray | None:
    """The system's uncertainty per item (higher: less sure), or None if it offers none.

    An optional capability (``System.uncertainty``); a system without it gets the fallback of
    ``Feedback.budget_scores``: the seeded random score, i.e. the random choice at the same budget.
    """
    method = getattr(system, "uncertainty", None)
    if method is None:
        return None
    values = method(batch)
    return None if values is None else np.asarray(values, np.float64)


class Feedback:
    """The realistic-feedback side of one run: who is revealed, with which label, and when."""

    def __init__(self, policy: Policy, seed: int, stream: Batch, seed_set: Batch, all_labels):
        self.policy = policy
        n = len(stream)
        self.coins = policy.coins(seed, n)
        if stream.labels is None:
            raise OcrrError("realistic feedback reveals true labels: the stream must carry them")
        self.labels = list(stream.labels)
        self.given = list(stream.labels)  # the label each position's correction carries
        if policy.noise > 0:
            flip = draws(seed, b"feedback-noise", n) < policy.noise
            if policy.noise_kind == "confusable":
                wrong = confusable_labels(seed_set, stream.vecs, self.labels)
            else:
                wrong = uniform_wrong_labels(draws(seed, b"feedback-noise-label", n), self.labels, all_labels)
            self.given = [w if f else t for f, w, t in zip(flip, wrong, self.labels)]
        if policy.delay_kind == "geometric" and policy.delay > 0:
            rng = np.random.default_rng(np.random.SeedSequence([int(seed), zlib.crc32(b"feedback-delay")]))
            self.delays = rng.geometric(1.0 / (policy.delay + 1.0), size=n) - 1  # support 0, 1, ...; mean `delay`
        else:
            self.delays = np.full(n, int(policy.delay), np.int64)
        self.random_scores = draws(seed, b"feedback-budget", n)
        self.selector = BudgetSelector(policy.budget) if policy.budget is not None else None
        self.queue = DeliveryQueue()

    @property
    def wants_uncertainty(self) -> bool:
        return self.selector is not None and self.policy.select == "uncertainty"

    def budget_scores(self, system, stream: Batch, a: int, b: int) -> np.ndarray | None:
        """Budget scores of positions a..b-1 by the system's current state: its uncertainty, or
        the seeded random score (``budget=f:random``, or a system offering no uncertainty);
        None without a budget."""
        if self.selector is None:
            return None
        values = system_uncertainty(system, stream[a:b]) if self.wants_uncertainty else None
        return self.random_scores[a:b] if values is None else values

    def reveal(self, position: int, predicted, score: float | None = None) -> bool:
        """Does the user correct this prediction (the base policy, then the budget)?"""
        wanted = (self.policy.reveals_right or predicted != self.labels[position]) and bool(self.coins[position])
        if not wanted or self.selector is None:
            return wanted
        return self.selector.offer(self.random_scores[position] if score is None else score)

    def send(self, position: int, made_at: int) -> None:
        """A correction made at stream time ``made_at`` (items predicted so far) goes in flight."""
        self.queue.push(position, made_at + int(self.delays[position]))

    def deliver(self, stream: Batch, now: int) -> tuple[list[int], Batch | None]:
        """The corrections due by ``now``, in arrival order, as one batch carrying the given labels."""
        due = self.queue.due(now)
        if not due:
            return due, None
        batch = stream[np.asarray(due)]
        return due, Batch(batch.vecs, batch.texts, [self.given[i] for i in due])
