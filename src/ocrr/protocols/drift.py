"""Within-class drift (issue 16; the paper's limitation 6.6 "categorical shift only").

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

``class_clusters`` also gives the CMR protocol a cluster map (``cmr:clusters=drift``): items
are grouped across classes by their index, d0 (core) .. d{k-1} (periphery), so a CMR stream
shifts between phrasings of known intents instead of between intents.
"""

from __future__ import annotations

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.clusters import crc
from ocrr.protocols.scenario import Scenario, every_n


def class_clusters(
    dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, n_clusters: int, who: str = "drift"
) -> tuple[np.ndarray, np.ndarray]:
    """Within-class cluster index of every training and test item (0 = nearest the class mean)."""
    from sklearn.cluster import KMeans

    train_labels = np.asarray(dataset.train.labels, dtype=object)
    test_labels = np.asarray(dataset.test.labels, dtype=object)
    train_j = np.full(len(train_labels), -1, np.int64)
    test_j = np.full(len(test_labels), -1, np.int64)
    for label in dataset.labels:
        rows = np.flatnonzero(train_labels == label)
        if len(rows) < n_clusters:
            raise OcrrError(
                f"protocol {who}: class {label!r} of {dataset.name} has {len(rows)} training items, fewer "
                f"than n_clusters={n_clusters}; lower {who}:n_clusters (at least 2)."
            )
        x = np.asarray(train_vecs[rows], np.float64)
        seed = int(
            np.random.SeedSequence(
                [crc("drift-kmeans"), crc(dataset.name), crc(str(label)), n_clusters]
            ).generate_state(1)[0]
        )
        km = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed).fit(x)
        centres = km.cluster_centers_ / np.maximum(np.linalg.norm(km.cluster_centers_, axis=1, keepdims=True), 1e-12)
        mean = x.mean(axis=0)
        order = np.argsort(-(centres @ (mean / max(np.linalg.norm(mean), 1e-12))), kind="stable")
        rank = np.empty(n_clusters, np.int64)
        rank[order] = np.arange(n_clusters)  # k-means cluster -> index by closeness to the class mean
        train_j[rows] = rank[km.labels_]
        test_rows = np.flatnonzero(test_labels == label)
        if len(test_rows):
            test_j[test_rows] = rank[np.argmax(np.asarray(test_vecs[test_rows], np.float64) @ centres.T, axis=1)]
    return train_j, test_j


def drift_cluster_names(dataset, train_vecs, test_vecs, n_clusters: int):
    """The CMR hook: (cluster names, name per training item, name per test item), d0..d{k-1}."""
    train_j, test_j = class_clusters(dataset, train_vecs, test_vecs, n_clusters, who="cmr")
    names = [f"d{j}" for j in range(n_clusters)]
    as_names = lambda j: np.array([f"d{v}" if v >= 0 else None for v in j], dtype=object)  # noqa: E731
    return names, as_names(train_j), as_names(test_j)


class DriftProtocol(Protocol):
    """Known classes whose phrasing drifts: one embedding cluster per class held out of the seed
    set and streamed; accuracy on the drifted clusters' and the stable clusters' test items."""

    name = "drift"
    summary_text = "within-class drift: one k-means cluster per known class is held out and streamed"
    options = {
        "n_clusters": Option(3, int, low=2, help="k-means clusters per class"),
        "out": Option("random", str, help="which cluster moves: random (per run seed) or farthest from the mean"),
        "eval_cap": Option(400, int, low=0, help="cap on each eval set; 0 for none"),
        "every": Option(50, int, low=1, help="checkpoint every N stream items"),
    }
    metrics = ("acc_drifted", "acc_stable")

    def __init__(self, **values):
        super().__init__(**values)
        if self.values["out"] not in ("random", "farthest"):
            raise OcrrError(
                f"protocol drift: option out={self.values['out']!r} must be random or farthest. "
                "Write e.g. drift:out=farthest."
            )

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
    rng = np.random.default_rng(seed)
    if eval_cap:
        if len(drifted_idx) > eval_cap:
            drifted_idx = drifted_idx[rng.choice(len(drifted_idx), size=eval_cap, replace=False)]
        if len(stable_idx) > eval_cap:
            stable_idx = stable_idx[rng.choice(len(stable_idx), size=eval_cap, replace=False)]
    stream_idx = stream_idx[rng.permutation(len(stream_idx))]
    train, test = dataset.train, dataset.test
    return Scenario(
        protocol="drift",
        seed_value=seed,
        labels=dataset.labels,
        seed_set=_rows(train, train_vecs, seed_idx),
        stream=_rows(train, train_vecs, stream_idx),
        eval_sets={"drifted": _rows(test, test_vecs, drifted_idx), "stable": _rows(test, test_vecs, stable_idx)},
        eval_after=every_n(len(stream_idx), every),
        stream_columns={"cluster": [f"{train.labels[i]}#d{train_j[i]}" for i in stream_idx]},
        info={
            "n_clusters": n_clusters,
            "out": out,
            "moved": {lab: f"d{j}" for lab, j in moved_of.items()},
            "n_stream": len(stream_idx),
            "n_drifted": len(drifted_idx),
            "n_stable": len(stable_idx),
        },
    )


def _rows(split, vecs: np.ndarray, idx: np.ndarray) -> Batch:
    texts = None if split.texts is None else [split.texts[i] for i in idx]
    return Batch(np.ascontiguousarray(vecs[idx]), texts, [split.labels[i] for i in idx])
