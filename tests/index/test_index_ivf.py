"""The IVF backends (ocrr.index.ivf): agreement with exact search, incremental add, exact
re-rank, target-recall tuning, auto's switch, the retraining trigger, and the systems'
options. Small sets only (a few thousand 32-d vectors)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.index import exact_search, make_index, recall_at_k
from ocrr.index.ivf import IVFIndex, nlist_for
from ocrr.index.rerank import rerank
from ocrr.index.vote import VoteRule, vote
from ocrr.systems import Batch, make_system

faiss = pytest.importorskip("faiss")

DIM = 32
IVF = ["ivf", "ivf_sq8", "ivf_pq"]


@pytest.fixture(autouse=True)
def one_faiss_thread():
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n_classes=20, per_class=200, n_queries=5, dim=DIM, noise=0.25, seed=0):
    """Class clusters in a 6-d subspace (plus a little ambient noise): near neighbours
    are meaningfully nearer than the rest of their class, as with text embeddings."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((dim, 6)))[0]
    cent = rng.standard_normal((n_classes, 6))
    cent /= np.linalg.norm(cent, axis=1, keepdims=True)

    def draw(per):
        lab = np.repeat(np.arange(n_classes), per)
        z = (cent[lab] + noise * rng.standard_normal((len(lab), 6))) @ basis.T
        z += 0.01 * rng.standard_normal(z.shape)
        return (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32), lab

    x, labels = draw(per_class)
    q, q_labels = draw(n_queries)
    return x, labels, q, q_labels


def built(kind, x, batch=None, **params):
    index = make_index(kind, x.shape[1], **{"ivf_min_train": 1000, "nlist": 32, **params})
    batch = batch or len(x)
    for lo in range(0, len(x), batch):
        index.add(x[lo : lo + batch], np.arange(lo, min(len(x), lo + batch)))
    return index


@pytest.mark.parametrize("kind", IVF)
def test_ivf_and_exact_agree_on_a_clustered_set_at_the_tuned_settings(kind):
    x, labels, q, _ = clustered(n_queries=20)
    index = built(kind, x, target_recall=0.95)
    assert index.trained and index.tuning["met"] and index.tuning["recall_bound"] >= 0.95
    sims, ids = index.search(q, 5)  # 400 fresh queries
    es, ei = exact_search(x, q, 5)
    assert recall_at_k(ids, ei) >= 0.95
    rule = VoteRule(k=5)
    assert np.mean(vote(sims, ids, labels[ids], rule) == vote(es, ei, labels[ei], rule)) >= 0.99
    # the same answers one query at a time
    one = np.concatenate([index.search(q[i : i + 1], 5)[1] for i in range(len(q))])
    assert np.array_equal(one, ids)


@pytest.mark.parametrize("kind", IVF)
@pytest.mark.parametrize("borrow", [False, True])
def test_incremental_add_indexes_the_same_ids_as_a_bulk_build(kind, borrow):
    x, _, q, _ = clustered(n_classes=10)
    source = (lambda: x) if borrow else None
    bulk = make_index(kind, DIM, source=source, nlist=16)
    bulk.build(x, np.arange(len(x)))
    grown = make_index(kind, DIM, source=source, nlist=16, ivf_min_train=500)
    for lo in range(0, len(x), 97):  # staged exactly until 500, then trained, then appended
        grown.add(x[lo : lo + 97], np.arange(lo, min(len(x), lo + 97)))
    assert grown.trained and len(grown) == len(bulk) == len(x)
    assert np.array_equal(np.sort(grown.ids), np.sort(bulk.ids))
    assert np.array_equal(grown.vectors[np.argsort(grown.ids)], x)
    lists = grown.list_sizes()
    assert lists.sum() == len(x) and len(lists) == 16


@pytest.mark.parametrize("kind", IVF)
def test_the_rerank_returns_exact_similarities(kind):
    x, _, q, _ = clustered()
    index = built(kind, x, nprobe=4, rerank=20)
    sims, ids = index.search(q, 5)
    assert sims.dtype == np.float32 and ids.dtype == np.int64 and np.all(ids >= 0)
    want = np.einsum("nkd,nd->nk", x[ids].astype(np.float64), q.astype(np.float64))
    assert np.allclose(sims, want, atol=1e-6)  # float32 dot products, not code scores
    assert np.all(np.diff(sims, axis=1) <= 0)


def test_rerank_pads_missing_candidates_and_orders_ties_by_id_desc():
    m = np.eye(4, dtype=np.float32)
    m[3] = m[1]
    q = m[1:2]
    sims, ids = rerank(q, np.array([[1, 3, -1]]), m, None, 4)
    assert ids.tolist() == [[3, 1, -1, -1]] and sims[0, :2].tolist() == [1.0, 1.0]
    assert np.all(np.isneginf(sims[0, 2:]))


@pytest.mark.parametrize("kind", IVF)
def test_target_recall_is_met_on_a_held_out_sample(kind):
    x, _, _, _ = clustered(n_classes=20, per_class=300)
    index = built(kind, x, target_recall=0.9)
    assert index.tuning["met"] and index.tuning["n_queries"] == 200
    # a different sample of stored entries, each left out of its own answer
    rng = np.random.default_rng(99)
    held = rng.choice(len(x), 200, replace=False)
    _, got = index.search(x[held], 6)
    _, truth = exact_search(x, x[held], 6)
    drop = lambda ids: np.array([[i for i in row if i != h][:5] for row, h in zip(ids, held)])  # noqa: E731
    assert recall_at_k(drop(got), drop(truth)) >= 0.9
    # tuning is deterministic: the same data and seed pick the same setting
    again = built(kind, x, target_recall=0.9)
    assert (again.nprobe, again.rerank) == (index.nprobe, index.rerank)


def test_an_unreachable_target_is_reported_not_hidden(caplog):
    x = np.random.default_rng(0).standard_normal((3000, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # isotropic: every neighbour about as far as any other
    with caplog.at_level(logging.WARNING, logger="ocrr.index"):
        index = built("ivf_pq", x, target_recall=1.0, pq_m=4)
    assert not index.tuning["met"] or index.tuning["recall"] == 1.0
    if not index.tuning["met"]:
        assert "no setting reached" in caplog.text


def test_removal_hides_entries_in_both_modes():
    x, _, q, _ = clustered(n_classes=10)
    for source in (None, lambda: x):
        index = make_index("ivf_sq8", DIM, source=source, nlist=16)
        index.build(x, np.arange(len(x)))
        _, ids = index.search(q, 5)
        gone = np.unique(ids)
        index.remove(gone)
        _, after = index.search(q, 5)
        assert not np.isin(after, gone).any() and len(index) == len(x) - len(gone)
        assert np.array_equal(np.sort(index.ids), np.setdiff1d(np.arange(len(x)), gone))


def test_memory_mapped_source(tmp_path):
    x, _, q, _ = clustered(n_classes=10)
    path = tmp_path / "vecs.f32"
    x.tofile(path)
    mm = np.memmap(path, np.float32, mode="r", shape=x.shape)
    index = make_index("ivf_pq", DIM, source=lambda: mm, nlist=16, nprobe=16, rerank=2000)
    index.build(mm, np.arange(len(x)))
    assert index.borrowed and index.nbytes < x.nbytes / 4  # codes and lists, not a float copy
    assert np.array_equal(index.search(q, 5)[1], exact_search(x, q, 5)[1])  # every list, every candidate


def test_nlist_rule():
    assert nlist_for(10_000_000) == 8192 and nlist_for(1_000_000) == 2048 and nlist_for(200_000) == 1024
    assert nlist_for(1000) == 16  # at least 16, and ~32 training points per list when possible


def test_retrain_trigger_and_rebuild_index(caplog):
    x, labels, q, q_labels = clustered(n_classes=20, per_class=200)
    index = IVFIndex(DIM, "ivf_sq8", nlist=16, min_train=500)
    with caplog.at_level(logging.WARNING, logger="ocrr.index"):
        for lo in range(0, 1900, 100):
            index.add(x[lo : lo + 100], np.arange(lo, lo + 100))
        assert index.trained_on == 500 and not index.needs_retrain  # 1900 <= 4 x 500
        index.add(x[1900:2100], np.arange(1900, 2100))
    assert index.needs_retrain and "call rebuild_index() to retrain" in caplog.text
    # the substrate's maintenance step retrains on the whole ledger
    names = np.array([f"c{c:02d}" for c in range(20)])
    sub = make_system("substrate:index=ivf_sq8:nlist=16").fit(Batch(x, None, names[labels].tolist()))
    assert not sub.index_.trained  # 4000 entries: below the 20 000 staging threshold, searched exactly
    sub.rebuild_index()
    assert sub.index_.trained and sub.index_.trained_on == len(x) and not sub.index_.needs_retrain
    assert sub.predict(Batch(q)) == make_system("substrate").fit(Batch(x, None, names[labels].tolist())).predict(
        Batch(q)
    )


def test_auto_picks_exact_below_the_threshold_and_ivf_above_with_the_reason_logged(caplog):
    x, _, q, _ = clustered()
    index = make_index("auto", DIM, threshold=2000, nlist=16)
    index.add(x[:2000], np.arange(2000))
    assert index.exact and "exact: 2,000 live entries <= threshold 2,000" == index.reason
    with caplog.at_level(logging.INFO, logger="ocrr.index"):
        index.add(x[2000:], np.arange(2000, len(x)))
    assert index.name == "auto(ivf_pq)" and index.reason.startswith("ivf_pq: 4,000 live entries > threshold 2,000")
    assert index.reason in caplog.text
    assert index.backend.trained_on == len(x)  # k-means saw an even spread of everything stored
    assert make_index("auto_sq8", DIM, threshold=10).switch_to == "ivf_sq8"
    assert make_index("auto", DIM, switch_to="hnsw").switch_to == "hnsw"


def test_systems_record_the_tuned_settings_and_rebuild_from_them():
    x, labels, q, _ = clustered()
    names = np.array([f"c{c:02d}" for c in range(20)])
    seed = Batch(x, None, names[labels].tolist())
    spec = "substrate:index=ivf:nlist=32:target_recall=0.95:auto_threshold=100"
    sub = make_system(spec).fit(seed)
    sub.rebuild_index()
    hyper = sub.hyperparameters()
    assert hyper["index"] == "ivf" and hyper["target_recall"] == 0.95
    assert (hyper["nprobe"], hyper["rerank"]) == (sub.index_.nprobe, sub.index_.rerank)
    again = make_system("substrate:" + ":".join(f"{k}={v}" for k, v in hyper.items())).fit(seed)
    again.rebuild_index()
    assert again.hyperparameters() == hyper
    assert "nprobe" not in make_system("substrate").hyperparameters()  # exact keeps its short record
    knn = make_system("knn_lm:index=ivf_sq8:nprobe=4:rerank=30")
    assert knn.hyperparameters()["nprobe"] == 4 and knn.hyperparameters()["rerank"] == 30


@pytest.mark.parametrize(
    "bad, match",
    [
        ("target_recall=1.5", "target_recall must be a number in"),
        ("nprobe=0", "nprobe must be an integer ≥ 1"),
        ("nlist=-1", "nlist must be an integer ≥ 0"),
    ],
)
def test_bad_ivf_options_name_the_fix(bad, match):
    with pytest.raises(OcrrError, match=match):
        make_system(f"substrate:index=ivf_pq:{bad}")


@pytest.mark.parametrize("kind", ["ivf_sq8", "ivf_pq"])
def test_target_agreement_is_met_on_held_out_queries_at_a_cheap_setting(kind):
    x, labels, q, _ = clustered(n_classes=20, per_class=300, n_queries=20, noise=0.5)
    index = IVFIndex(
        DIM, kind, nlist=32, min_train=1000, target_agreement=0.99, tune_queries=400, label_of=lambda ids: labels[ids]
    )
    index.build(x, np.arange(len(x)))
    t = index.tuning
    assert t["objective"] == "agreement" and t["met"] and t["agreement_bound"] >= 0.99 and t["n_queries"] == 400
    assert (index.nprobe, index.rerank) == (t["nprobe"], t["rerank"])
    assert t["cost_bytes"] < max(p["cost_bytes"] for p in t["points"])  # not the most expensive point tried
    # cheaper settings exist that this sample says disagree too often: the pick is not a free lunch
    assert any(p["agreement_bound"] < 0.99 for p in t["points"])
    # 400 fresh items of the same classes, never stored: the substrate's vote over the tuned
    # IVF top-5 against its vote over the exact top-5
    sims, ids = index.search(q, 5)
    es, ei = exact_search(x, q, 5)
    rule = VoteRule(k=5)
    assert np.mean(vote(sims, ids, labels[ids], rule) == vote(es, ei, labels[ei], rule)) >= 0.99
    again = IVFIndex(
        DIM, kind, nlist=32, min_train=1000, target_agreement=0.99, tune_queries=400, label_of=lambda ids: labels[ids]
    )
    again.build(x, np.arange(len(x)))
    assert (again.nprobe, again.rerank) == (index.nprobe, index.rerank)


def test_an_unreachable_target_falls_back_to_the_cheapest_point_within_the_tolerance(caplog):
    x = np.random.default_rng(0).standard_normal((3000, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    best = built("ivf_pq", x, target_recall=1.0, pq_m=4).tuning
    index = IVFIndex(DIM, "ivf_pq", nlist=32, min_train=1000, pq_m=4, target_recall=1.0, tune_tolerance=0.1)
    with caplog.at_level(logging.WARNING, logger="ocrr.index"):
        index.build(x, np.arange(len(x)))
    t = index.tuning
    assert not t["met"] and not best["met"] and "cheapest within tolerance 0.100" in caplog.text
    top = max(p["recall_bound"] for p in t["points"])
    assert best["recall_bound"] == top  # tolerance 0: the best point, as before
    assert t["recall_bound"] >= top - 0.1 and t["cost_bytes"] < best["cost_bytes"]
    assert t["cost_bytes"] == min(p["cost_bytes"] for p in t["points"] if p["recall_bound"] >= top - 0.1)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"target_agreement": 1.0}, "target_agreement must be in"),
        ({"target_agreement": 0.99}, "needs the entries' labels"),
        ({"target_agreement": 0.99, "label_of": np.abs, "tune_queries": 200}, "use at least 396 tuning queries"),
        ({"tune_tolerance": -0.1}, "tolerance must be in"),
    ],
)
def test_bad_tuning_values_are_refused_with_the_fix(params, match):
    with pytest.raises(ValueError, match=match):
        IVFIndex(DIM, "ivf_pq", **params)


def test_a_substrate_tunes_its_ivf_index_for_its_own_vote():
    x, labels, q, _ = clustered(n_classes=20, per_class=300, n_queries=40, noise=0.5)
    names = np.array([f"c{c:02d}" for c in range(20)])
    seed = Batch(x, None, names[labels].tolist())
    sub = make_system("substrate:index=ivf_pq:nlist=32:target_agreement=0.99:margin=0.02").fit(seed)
    sub.rebuild_index()  # k-means over the ledger, then tuning for the substrate's own vote
    t = sub.index_.tuning
    assert t["objective"] == "agreement" and t["met"] and t["agreement_bound"] >= 0.99
    assert t["n_queries"] == 594  # 1.5x the 396 that could certify 0.99 only with a perfect score
    assert sub.index_.vote_rule is sub.rule_  # its margin band, not a default rule
    hyper = sub.hyperparameters()
    assert hyper["target_agreement"] == 0.99 and (hyper["nprobe"], hyper["rerank"]) == (t["nprobe"], t["rerank"])
    exact = make_system("substrate:margin=0.02").fit(seed)
    fresh = Batch(q, None, None)
    assert np.mean(np.array(sub.predict(fresh)) == np.array(exact.predict(fresh))) >= 0.95
    assert "target_agreement" not in make_system("substrate:index=ivf_pq").hyperparameters()  # old records stay
    knn = make_system("knn_lm:index=ivf_sq8:target_agreement=0.99")
    assert knn.hyperparameters()["target_agreement"] == 0.99


@pytest.mark.parametrize(
    "bad, match",
    [
        ("index=ivf_pq:target_agreement=1", "target_agreement must be a number in"),
        ("target_agreement=0.99", "target_agreement tunes an IVF index"),
    ],
)
def test_bad_agreement_options_name_the_fix(bad, match):
    with pytest.raises(OcrrError, match=match):
        make_system(f"substrate:{bad}")


@pytest.mark.parametrize("grouped", [False, True])
def test_search_parameters_kept_between_searches_follow_nprobe_and_the_index(grouped):
    """An index keeps the FAISS search parameters of its last nprobe: searches at changing
    nprobe answer as an index searching for the first time at each."""
    x, _, q, _ = clustered(n_queries=20)
    extra = {"grouped_quantizer_from": 8} if grouped else {}

    def fresh():
        return built("ivf_pq", x, nprobe=4, rerank=20, **extra)

    index = fresh()
    for nprobe in (2, 8, 2, 32, 1, None):
        assert np.array_equal(index.candidates(q, 20, nprobe), fresh().candidates(q, 20, nprobe))
    assert np.array_equal(index.candidates(q, 20, 3), index.candidates(q, 20, 3))
