"""The within-class drift protocol: the class set is kept, whole clusters move, and it runs
through the engine (and gives CMR a cluster map)."""

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.engine.runner import run_to_output
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols import make_protocol
from ocrr.protocols.drift import class_clusters
from ocrr.systems import make_system


@pytest.fixture(scope="module")
def data():
    ds = clustered_dataset(n_classes=6, dim=16, n_train=30, n_test=12, noise=0.3, seed=5)
    return ds, ds.train.vecs, ds.test.vecs


def test_the_split_keeps_the_class_set_and_moves_whole_clusters(data):
    ds, train, test = data
    protocol = make_protocol("drift:n_clusters=3:eval_cap=0")
    sc = protocol.scenario(ds, train, test, seed=4)
    assert set(sc.seed_set.labels) == set(ds.labels) == set(sc.stream.labels)  # every class known and drifting
    train_j, test_j = class_clusters(ds, train, test, 3)
    moved = {label: int(c[1:]) for label, c in sc.info["moved"].items()}
    labels = np.asarray(ds.train.labels, dtype=object)
    in_stream = {v.tobytes() for v in sc.stream.vecs}
    for i, v in enumerate(train):
        # an item is streamed exactly when its cluster is its class's moved one
        assert (v.tobytes() in in_stream) == (train_j[i] == moved[labels[i]])
    assert len(sc.seed_set) + len(sc.stream) == len(ds.train)
    test_labels = np.asarray(ds.test.labels, dtype=object)
    n_drifted = sum(test_j[i] == moved[test_labels[i]] for i in range(len(test_labels)))
    assert len(sc.eval_sets["drifted"]) == n_drifted and len(sc.eval_sets["stable"]) == len(ds.test) - n_drifted
    assert len(set(sc.stream_columns["cluster"])) == len(ds.labels)  # one moved cluster per class


def test_clusters_are_ordered_from_core_to_periphery_and_fixed_per_dataset(data):
    ds, train, test = data
    a = class_clusters(ds, train, test, 3)
    b = class_clusters(ds, train, test, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    labels = np.asarray(ds.train.labels, dtype=object)
    for label in ds.labels:
        rows = labels == label
        mean = train[rows].mean(axis=0)
        mean /= np.linalg.norm(mean)
        centre = [train[rows & (a[0] == j)].mean(axis=0) for j in range(3)]
        cos = [c @ mean / np.linalg.norm(c) for c in centre]
        assert cos[0] >= cos[1] >= cos[2]


def test_the_moved_cluster_depends_on_the_seed_or_is_the_farthest(data):
    ds, train, test = data
    runs = [make_protocol("drift").scenario(ds, train, test, seed=s).info["moved"] for s in range(4)]
    assert len({tuple(sorted(m.items())) for m in runs}) > 1
    far = make_protocol("drift:out=farthest").scenario(ds, train, test, seed=0).info["moved"]
    assert set(far.values()) == {"d2"}


def test_a_static_system_scores_above_zero_and_the_substrate_recovers(data):
    ds, train, test = data
    sc = make_protocol("drift:every=20").scenario(ds, train, test, seed=1)
    final = {}
    for spec in ("static_knn", "substrate"):
        out = run_to_output(make_system(spec, labels=sc.labels, seed=1), sc, make_policy("oracle"))
        final[spec] = {r["metric"]: r["value"] for r in out.metrics if r["step"] == len(sc.stream)}
    assert final["static_knn"]["acc_drifted"] > 0
    assert final["substrate"]["acc_drifted"] >= final["static_knn"]["acc_drifted"]


def test_bad_options_fail_at_the_door(data):
    ds, train, test = data
    with pytest.raises(OcrrError, match="out must be one of random, farthest"):
        make_protocol("drift:out=middle")
    with pytest.raises(OcrrError, match="n_clusters"):
        make_protocol("drift:n_clusters=1")
    with pytest.raises(OcrrError, match="lower drift:n_clusters"):
        make_protocol("drift:n_clusters=31").scenario(ds, train, test, seed=0)


def test_cmr_takes_the_within_class_clusters_as_its_cluster_map(data):
    ds, train, test = data
    sc = make_protocol("cmr:clusters=drift:n_clusters=3:T=5:b=8:upstream=d0").scenario(ds, train, test, seed=0)
    train_j, _ = class_clusters(ds, train, test, 3)
    assert set(sc.seed_set.labels) == set(ds.labels)  # every class is known upstream: only phrasings shift
    seed_rows = {v.tobytes() for v in sc.seed_set.vecs}
    assert seed_rows == {v.tobytes() for v, j in zip(train, train_j) if j == 0}
    by_vec = {v.tobytes(): j for v, j in zip(train, train_j)}
    for v, cluster, role in zip(sc.stream.vecs, sc.stream_columns["cluster"], sc.stream_columns["role"]):
        assert cluster == f"d{by_vec[v.tobytes()]}" and (role == "upstream") == (cluster == "d0")
    assert sc.info["ood"] == ["d1", "d2"]
