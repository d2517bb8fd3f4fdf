"""Within-class drift (the paper's limitation 6.6 "categorical shift only").

Every class keeps its name, but the way people phrase it moves: each known class's training
items are split into ``n_clusters`` embedding-space clusters (``class_clusters``: scikit-learn
k-means per class, ``n_init=10``, a seed from the dataset name, the label and k), and one
cluster per class stays out of the seed set and arrives in the stream. The class set is the
same before and after; only whole clusters move. A static system therefore scores above zero
on the drifted phrasings, and the comparison becomes how fast each system recovers.

Scenario, per run seed:

1. cluster index j of each item: training items by k-means, test items by the nearest centroid
   of their own class; indices are ordered by the centroid's cosine to the class mean, so
   j = 0 is the class's core phrasing and j = k - 1 its most peripheral one;
2. the cluster that moves: per class (in sorted label order) ``default_rng(SeedSequence([seed,
   crc32("drift-out")])).integers(k)`` (``out=random``) or always k - 1 (``out=farthest``);
3. seed set: the other clusters' training items (file order); stream: the moved clusters'
   training items, shuffled by a fresh ``default_rng(seed)``'s permutation after capping the
   eval sets as the held-out protocol does (drifted first, then stable);
4. eval sets: ``drifted`` (test items of the moved clusters) and ``stable`` (the rest).

``class_clusters`` (ocrr.protocols.clusters) also gives the CMR protocol a cluster map
(``cmr:clusters=drift``): items are grouped across classes by their index, d0 (core) ..
d{k-1} (periphery), so a CMR stream shifts between phrasings of known intents instead of
between intents.
"""

from __future__ import annotations

import numpy as np

from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.clusters import class_clusters
from ocrr.protocols.scenario import Scenario, cap_and_shuffle, crc, every_n, split_rows


class DriftProtocol(Protocol):
    """Known classes whose phrasing drifts: one embedding cluster per class held out of the seed
    set and streamed; accuracy on the drifted clusters' and the stable clusters' test items."""

    name = "drift"
    summary_text = "within-class drift: one k-means cluster per known class is held out and streamed"
    options = {
        "n_clusters": Option(3, int, low=2, help="k-means clusters per class"),
        "out": Option(
            "random",
            str,
            choices=("random", "farthest"),
            help="which cluster moves: random (per run seed) or farthest from the mean",
        ),
        "eval_cap": Option(400, int, low=0, help="cap on each eval set; 0 for none"),
        "every": Option(50, int, low=1, help="checkpoint every N stream items"),
    }
    metrics = ("acc_drifted", "acc_stable")

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        return drift_scenario(dataset, train_vecs, test_vecs, seed, **self.values)


def drift_scenario(
    dataset,
    train_vecs: np.ndarray,
    test_vecs: np.ndarray,
    seed: int,
    n_clusters: int = 3,
    out: str = "random",
    eval_cap: int = 400,
    every: int = 50,
) -> Scenario:
    train_j, test_j = class_clusters(dataset, train_vecs, test_vecs, n_clusters)
    labels = list(dataset.labels)
    if out == "random":
        moved = np.random.default_rng(np.random.SeedSequence([int(seed), crc("drift-out")])).integers(
            n_clusters, size=len(labels)
        )
    else:
        moved = np.full(len(labels), n_clusters - 1)
    moved_of = dict(zip(labels, moved.tolist()))
    train_moves = np.array([moved_of[lab] == j for lab, j in zip(dataset.train.labels, train_j)])
    test_moves = np.array([moved_of[lab] == j for lab, j in zip(dataset.test.labels, test_j)], dtype=bool)
    seed_idx, stream_idx = np.flatnonzero(~train_moves), np.flatnonzero(train_moves)
    drifted_idx, stable_idx = np.flatnonzero(test_moves), np.flatnonzero(~test_moves)
    eval_idx, stream_idx = cap_and_shuffle(seed, eval_cap, {"drifted": drifted_idx, "stable": stable_idx}, stream_idx)
    return Scenario(
        protocol="drift",
        seed_value=seed,
        labels=dataset.labels,
        eval_after=every_n(len(stream_idx), every),
        **split_rows(dataset, train_vecs, test_vecs, seed_idx, stream_idx, eval_idx),
        stream_columns={"cluster": [f"{dataset.train.labels[i]}#d{train_j[i]}" for i in stream_idx]},
        info={
            "n_clusters": n_clusters,
            "out": out,
            "moved": {lab: f"d{j}" for lab, j in moved_of.items()},
            "n_stream": len(stream_idx),
            "n_drifted": len(eval_idx["drifted"]),
            "n_stable": len(eval_idx["stable"]),
        },
    )
