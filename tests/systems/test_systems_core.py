"""Defining behaviour of the core systems: substrate, static_knn, static_linear, online_linear."""

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.errors import OcrrError
from ocrr.systems import Batch, make_system


def batch_of(split, idx=None):
    idx = np.arange(len(split)) if idx is None else np.asarray(idx)
    return Batch(split.vecs[idx], [split.texts[i] for i in idx], [split.labels[i] for i in idx])


def seed_and_new(ds, n_known):
    """Seed batch of the first n_known classes and train/test batches of the others."""
    known = set(ds.labels[:n_known])
    tr = [i for i, label in enumerate(ds.train.labels) if label in known]
    tr_new = [i for i, label in enumerate(ds.train.labels) if label not in known]
    te_old = [i for i, label in enumerate(ds.test.labels) if label in known]
    te_new = [i for i, label in enumerate(ds.test.labels) if label not in known]
    return (batch_of(ds.train, tr), batch_of(ds.train, tr_new), batch_of(ds.test, te_old), batch_of(ds.test, te_new))


def acc(system, batch):
    return float(np.mean([p == t for p, t in zip(system.predict(batch), batch.labels)]))


CORE = ["substrate", "static_knn", "static_linear", "online_linear"]


@pytest.mark.parametrize("spec", CORE)
def test_predict_is_batched_consistent_and_side_effect_free(spec, toy):
    seed, new, old_test, _ = seed_and_new(toy, 8)
    system = make_system(spec, labels=toy.labels, seed=0).fit(seed)
    system.correct(new[:5])
    before = system.predict(old_test)
    one_by_one = [system.predict(old_test[i])[0] for i in range(len(old_test))]
    assert before == one_by_one
    assert system.predict(old_test) == before  # predicting twice changes nothing
    assert system.footprint().bytes > 0


def test_substrate_learns_from_one_correction_and_forgets_nothing(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    sub = make_system("substrate", labels=toy.labels).fit(seed)
    assert acc(sub, new_test) == 0.0
    before_old = sub.predict(old_test)
    first_new = new[0]
    sub.correct(first_new)
    assert sub.predict(first_new) == list(first_new.labels)  # the corrected item itself is now right
    sub.correct(new[1:])
    assert acc(sub, new_test) > 0.95
    # Novel corrections live far from old clusters: old predictions are untouched.
    assert sub.predict(old_test) == before_old
    assert len(sub.ledger_) == len(seed) + len(new)
    assert sub.verify().ok


def test_substrate_ledger_records_corrections_in_order(toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    sub = make_system("substrate").fit(seed)
    head = sub.ledger_.head
    sub.predict(new)
    assert sub.ledger_.head == head  # predict never appends
    sub.correct(new[:3])
    tail = [sub.ledger_[i] for i in range(len(seed), len(seed) + 3)]
    assert [e.label for e in tail] == list(new.labels[:3])
    assert [e.text for e in tail] == list(new.texts[:3])
    assert sub.verify(expected_head=sub.ledger_.head).ok


def test_static_knn_never_changes(toy):
    seed, new, _, new_test = seed_and_new(toy, 8)
    knn = make_system("static_knn").fit(seed)
    before = knn.predict(new_test)
    knn.correct(new)
    assert knn.predict(new_test) == before
    assert knn.footprint().entries == len(seed)


def test_static_linear_knows_only_the_seed_classes(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    lin = make_system("static_linear", labels=toy.labels).fit(seed)
    assert acc(lin, old_test) > 0.9
    lin.correct(new)
    assert set(lin.predict(new_test)) <= set(seed.labels)
    assert lin.head_.out_features == 8


def test_online_linear_learns_novel_classes_by_sgd(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    lin = make_system("online_linear", labels=toy.labels).fit(seed)
    assert lin.head_.out_features == len(toy.labels)  # pre-allocated over the full label list
    assert acc(lin, new_test) == 0.0
    w0 = lin.head_.weight.detach().clone()
    for _ in range(3):
        lin.correct(new)
    assert acc(lin, new_test) > 0.5
    assert not np.allclose(w0.numpy(), lin.head_.weight.detach().numpy())


def test_online_linear_step_is_plain_sgd(toy):
    import torch

    seed, new, _, _ = seed_and_new(toy, 8)
    lin = make_system("online_linear:lr=0.5", labels=toy.labels).fit(seed)
    w, b = lin.head_.weight.detach().clone().requires_grad_(), lin.head_.bias.detach().clone().requires_grad_()
    x = torch.from_numpy(new.vecs[:1])
    y = torch.tensor([lin.space_.encode(new.labels[:1])[0]])
    torch.nn.functional.cross_entropy(x @ w.T + b, y).backward()
    lin.correct(new[:1])
    assert torch.allclose(lin.head_.weight, w - 0.5 * w.grad, atol=1e-6)
    assert torch.allclose(lin.head_.bias, b - 0.5 * b.grad, atol=1e-6)


@pytest.mark.parametrize("spec", ["substrate", "online_linear"])
def test_label_first_seen_in_a_correction(spec, toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    system = make_system(spec, labels=None).fit(seed)  # no label list: the space is open
    item = Batch(new.vecs[:1], ["brand new"], ["never_seen_label"])
    for _ in range(20 if spec == "online_linear" else 1):
        system.correct(item)
    assert system.predict(item) == ["never_seen_label"]


@pytest.mark.parametrize("spec", CORE)
def test_wrong_dimension_and_nan_are_refused(spec, toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    system = make_system(spec, labels=toy.labels).fit(seed)
    with pytest.raises(OcrrError, match="dimension 5.*fitted on dimension 16"):
        system.predict(Batch(np.ones((1, 5), np.float32)))
    bad = new.vecs[:2].copy()
    bad[1, 3] = np.nan
    with pytest.raises(OcrrError, match="row 1 contains NaN"):
        system.predict(Batch(bad))


def test_substrate_refuses_bad_corrections(toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    sub = make_system("substrate").fit(seed)
    n = len(sub.ledger_)
    bad = new.vecs[:1].copy()
    bad[0, 0] = np.inf
    with pytest.raises(OcrrError):
        sub.correct(Batch(bad, None, ["x"]))
    with pytest.raises(OcrrError, match="needs one label per item"):
        sub.correct(Batch(new.vecs[:1]))
    assert len(sub.ledger_) == n  # nothing half-written


def test_unknown_system_names_the_fix():
    with pytest.raises(OcrrError, match="unknown system 'substrat'.*Did you mean substrate.*ocrr systems"):
        make_system("substrat")


def test_hyperparameter_overrides():
    sub = make_system("substrate:k=3:margin=0.1:tiebreak_recency=false")
    assert (sub.k, sub.margin, sub.tiebreak_recency) == (3, 0.1, False)
    with pytest.raises(OcrrError, match="system substrate has no option nonsense.*ocrr systems substrate"):
        make_system("substrate:nonsense=1")
    with pytest.raises(OcrrError, match="key=value"):
        make_system("substrate:k")


def test_incremental_evaluation_equals_a_fresh_scan():
    ds = clustered_dataset(n_classes=20, dim=32, n_train=40, noise=0.3, seed=5)
    seed, new, old_test, new_test = seed_and_new(ds, 10)
    evalset = Batch(np.concatenate([old_test.vecs, new_test.vecs]), None, list(old_test.labels) + list(new_test.labels))
    live = make_system("substrate").fit(seed)
    for lo in range(0, len(new), 37):
        live.predict(evalset)  # warms the incremental cache
        live.correct(new[lo : lo + 37])
        fresh = make_system("substrate").fit(seed)
        fresh.correct(new[: lo + 37])
        assert live.predict(evalset) == fresh.predict(evalset)


def test_head_methods_share_one_upstream_model_and_never_each_others_updates(toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    a = make_system("online_linear", labels=toy.labels, seed=1).fit(seed)
    b = make_system("online_linear:lr=0.2", labels=toy.labels, seed=1).fit(seed)
    assert np.array_equal(a.head_.weight.detach().numpy(), b.head_.weight.detach().numpy())
    a.correct(new[:10])
    c = make_system("online_linear", labels=toy.labels, seed=1).fit(seed)
    assert np.array_equal(b.head_.weight.detach().numpy(), c.head_.weight.detach().numpy())
    assert not np.array_equal(a.head_.weight.detach().numpy(), c.head_.weight.detach().numpy())
    other_seed = make_system("online_linear", labels=toy.labels, seed=2).fit(seed)
    assert not np.array_equal(other_seed.head_.weight.detach().numpy(), c.head_.weight.detach().numpy())


def test_all_means_every_paper_system_but_not_the_optional_lora_ones():
    from ocrr.systems import expand_systems

    everything = expand_systems(["all"])
    for name in (
        "substrate",
        "static_knn",
        "static_linear",
        "online_linear",
        "ewc",
        "a_gem",
        "lwf",
        "knn_lm",
        "river_logreg",
        "bounded_reservoir_1000",
        "bounded_fifo_100",
        "substrate_sumsim",
    ):
        assert name in everything
    assert "lora" not in everything and "bounded_reservoir" not in everything
    assert expand_systems(["substrate,online_linear", "substrate"]) == ["substrate", "online_linear"]


@pytest.mark.parametrize("checked", [False, True], ids=["fit", "fit_checked"])
def test_the_first_corrections_after_a_fit_fill_room_instead_of_copying_every_label(checked):
    """After a fit of n entries (an open of a ledger is ``fit_checked``), the entries' label
    codes sit in a buffer with free rows: the corrections that follow land there, where a
    buffer of exactly n would be copied whole into a new one by the first of them (at ten
    million entries, 80 MB while that correction waits). The answers are the same either way."""
    from ocrr.ledger.chain import GENESIS, entry_digest

    rng = np.random.default_rng(3)
    n = 5_000
    vecs = rng.normal(size=(n + 40, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    labels = [f"c{i % 7}" for i in range(n + 40)]
    texts = [f"t{i}" for i in range(n + 40)]
    seed = Batch(vecs[:n], texts[:n], labels[:n])
    sub = make_system("substrate")
    if checked:
        hashes, prev = [], GENESIS
        for i in range(n):  # the chain a durable store would have checked
            prev = entry_digest(i, labels[i], texts[i], vecs[i], prev)
            hashes.append(prev)
        sub.fit_checked(seed, hashes)
    else:
        sub.fit(seed)
    buffer = sub._entry_label.ctypes.data
    for i in range(n, n + 40):
        sub.correct(Batch(vecs[i : i + 1], texts[i : i + 1], labels[i : i + 1]))
    assert sub._entry_label.ctypes.data == buffer
    plain = make_system("substrate").fit(Batch(vecs, texts, labels))
    queries = vecs[::97] + np.float32(0.01)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    assert sub.predict(Batch(queries)) == plain.predict(Batch(queries))
    assert sub.space_.decode(sub._entry_label[: n + 40]) == labels
