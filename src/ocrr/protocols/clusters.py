"""Label -> cluster maps for the CMR protocol: a dataset's domains, k-means over class
centroids, or a map from a file.

* ``domains``: ``dataset.domains`` (CLINC150's ten domains). CLINC150's out-of-scope class
  ("oos", its own pseudo-domain) is left out: it is not one of the ten domains.
* ``kmeans``: the classes' training centroids (unit norm) grouped into ``n_clusters`` by
  scikit-learn's k-means (``n_init=10``, a seed derived from the dataset name and N);
  clusters are named ``k0``, ``k1``, ... in the order of their first class in the label list.
* a ``.json`` file ``{label: cluster}`` or a ``.csv`` file of ``label,cluster`` rows (a
  header row ``label,cluster`` is allowed). Labels the map does not name are left out.

``auto`` is ``domains`` when the dataset has them, else ``kmeans``. ``drift`` (``item_clusters``
only) groups items, not labels: within-class k-means clusters (``class_clusters``, which the
drift protocol moves, ocrr.protocols.drift).
Labels that are left out appear nowhere in the protocol (not in the seed set, the streams
or the evaluation sets); the systems still know every label.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.protocols.scenario import crc

LEFT_OUT_DOMAINS = ("oos",)  # CLINC150's out-of-scope pseudo-domain


def label_clusters(dataset, train_vecs: np.ndarray, how: str = "auto", n_clusters: int = 10) -> dict[str, str]:
    """label -> cluster name for the labels the protocol uses."""
    if how == "auto":
        how = "domains" if dataset.domains else "kmeans"
    if how == "domains":
        if not dataset.domains:
            raise OcrrError(
                f"protocol cmr: dataset {dataset.name} has no domains; use cmr:clusters=kmeans "
                "(with cmr:n_clusters=N) or cmr:clusters=<file.json|file.csv>."
            )
        return {
            label: str(d)
            for label, d in dataset.domains.items()
            if d not in LEFT_OUT_DOMAINS and label in set(dataset.labels)
        }
    if how == "kmeans":
        return kmeans_clusters(dataset, train_vecs, n_clusters)
    return file_clusters(how, dataset.labels)


def item_clusters(
    dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, how: str = "auto", n_clusters: int = 10
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(cluster names, cluster of every training item, of every test item; None: left out).
    ``drift`` groups items within their class (``class_clusters``: d0 = each class's core
    phrasing .. d{n-1} its most peripheral); every other map goes by label."""
    if how == "drift":
        return drift_cluster_names(dataset, train_vecs, test_vecs, n_clusters)
    cmap = label_clusters(dataset, train_vecs, how, n_clusters)
    train_c = np.array([cmap.get(label) for label in dataset.train.labels], dtype=object)
    test_c = np.array([cmap.get(label) for label in dataset.test.labels], dtype=object)
    return sorted(set(cmap.values())), train_c, test_c


def kmeans_clusters(dataset, train_vecs: np.ndarray, n_clusters: int) -> dict[str, str]:
    from sklearn.cluster import KMeans

    labels = list(dataset.labels)
    if not 3 <= n_clusters <= len(labels):
        raise OcrrError(
            f"protocol cmr: n_clusters={n_clusters} is impossible for {dataset.name} with "
            f"{len(labels)} classes; choose between 3 and {len(labels)}."
        )
    train_labels = np.asarray(dataset.train.labels, dtype=object)
    centroids = np.zeros((len(labels), train_vecs.shape[1]), np.float64)
    for i, label in enumerate(labels):
        rows = train_vecs[train_labels == label]
        if len(rows):
            c = rows.astype(np.float64).mean(axis=0)
            centroids[i] = c / max(np.linalg.norm(c), 1e-12)
    seed = int(np.random.SeedSequence([crc("cmr-kmeans"), crc(dataset.name), n_clusters]).generate_state(1)[0])
    assign = KMeans(n_clusters=n_clusters, n_init=10, random_state=seed).fit_predict(centroids)
    first: dict[int, int] = {}
    for k in assign:  # name clusters by the order of their first label
        first.setdefault(int(k), len(first))
    return {label: f"k{first[int(k)]}" for label, k in zip(labels, assign)}


def file_clusters(path: str, labels) -> dict[str, str]:
    p = Path(path)
    if p.suffix.lower() not in (".json", ".csv"):
        raise OcrrError(
            f"protocol cmr: clusters={path!r} is not auto, domains, kmeans, drift or a .json/.csv file "
            "mapping label -> cluster."
        )
    if not p.is_file():
        raise OcrrError(
            f"protocol cmr: cluster map {path!r} does not exist; give the path of a .json file "
            "{label: cluster} or a .csv file of label,cluster rows."
        )
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("not an object")
            pairs = list(raw.items())
        else:
            with p.open(newline="", encoding="utf-8") as f:
                pairs = [(r[0], r[1]) for r in csv.reader(f) if len(r) >= 2]
            if pairs and pairs[0] == ("label", "cluster"):
                pairs = pairs[1:]
    except (ValueError, OSError) as e:
        raise OcrrError(
            f"protocol cmr: cannot read the cluster map {path!r} ({e}); write a JSON object "
            "{label: cluster} or CSV rows label,cluster."
        ) from e
    known = set(labels)
    unknown = sorted(str(k) for k, _ in pairs if k not in known)
    if unknown:
        raise OcrrError(
            f"protocol cmr: the cluster map {path!r} names labels the dataset does not have: "
            f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}. Fix the map."
        )
    return {str(k): str(v) for k, v in pairs}


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
