"""Defining behaviour of the zoo: ewc, a_gem, lwf (continual), knn_lm (hybrid), river (online-ml)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.conftest import clustered_dataset

from ocrr.errors import OcrrError
from ocrr.systems import Batch, make_system
from ocrr.systems.buffers import reservoir_indices
from ocrr.systems.heads.continual import LwF, agem_project, predicted_class_fisher
from ocrr.systems.heads.linear import OnlineLinear
from ocrr.systems.river.classifiers import as_features

ZOO = ["ewc", "a_gem", "lwf", "knn_lm", "river_logreg", "river_softmax", "river_ovr_balanced"]
RIVER = ["river_logreg", "river_softmax", "river_ovr_balanced"]


def batch_of(split, idx=None):
    idx = np.arange(len(split)) if idx is None else np.asarray(idx)
    return Batch(split.vecs[idx], [split.texts[i] for i in idx], [split.labels[i] for i in idx])


def seed_and_new(ds, n_known):
    """Seed batch of the first n_known classes; train/test batches of the others; old test."""
    known = set(ds.labels[:n_known])
    pick = lambda split, keep: [i for i, label in enumerate(split.labels) if (label in known) == keep]  # noqa: E731
    return (
        batch_of(ds.train, pick(ds.train, True)),
        batch_of(ds.train, pick(ds.train, False)),
        batch_of(ds.test, pick(ds.test, True)),
        batch_of(ds.test, pick(ds.test, False)),
    )


def acc(system, batch):
    return float(np.mean([p == t for p, t in zip(system.predict(batch), batch.labels)]))


def flat_params(head):
    return torch.cat([p.detach().reshape(-1) for p in head.parameters()]).clone()


def flat_grad(head_params, x, y):
    """Gradient of mean CE of the linear head (w, b) given as one flat vector."""
    n_out = len(head_params) // (x.shape[1] + 1)
    theta = head_params.clone().requires_grad_()
    w, b = theta[: n_out * x.shape[1]].view(n_out, -1), theta[n_out * x.shape[1] :]
    F.cross_entropy(x @ w.T + b, y).backward()
    return theta.grad


# -- the contract every zoo system keeps -----------------------------------------------------


@pytest.mark.parametrize("spec", ZOO)
def test_fit_predict_correct_contract(spec, toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    system = make_system(spec, labels=toy.labels, seed=0)
    assert system.fit(seed) is system
    for key, value in system.hyperparameters().items():
        assert getattr(system, key) == value
    system.correct(new[:25])
    evalset = Batch(np.concatenate([old_test.vecs, new_test.vecs]))
    together = system.predict(evalset)
    assert together == [system.predict(evalset[i])[0] for i in range(len(evalset))]
    assert system.predict(evalset) == together  # predicting changes nothing
    assert set(together) <= set(toy.labels)
    assert system.footprint().bytes > 0
    with pytest.raises(OcrrError, match="needs one label per item"):
        system.correct(Batch(new.vecs[:1]))


@pytest.mark.parametrize("spec", ZOO)
def test_label_first_seen_in_a_correction(spec, toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    system = make_system(spec, labels=None, seed=0).fit(seed)  # open label space
    item = Batch(new.vecs[:1], ["brand new"], ["never_seen_label"])
    for n_corrections in range(1, 301):  # noqa: B007  (named in the message below)
        system.correct(item)
        if system.predict(item) == ["never_seen_label"]:
            break
    assert system.predict(item) == ["never_seen_label"], f"not learned after {n_corrections} corrections"
    if spec.startswith("river"):
        classes, _ = system.predict_proba(item)
        assert classes[-1] == "never_seen_label" and len(classes) == 9  # river added the class
    elif spec == "knn_lm":
        assert system.head_.out_features == 8  # frozen head; the datastore carries the label
    else:
        assert system.head_.out_features == 9  # the head grew a row


@pytest.mark.parametrize("spec", ZOO)
def test_wrong_dimension_and_nan_are_refused(spec, toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    system = make_system(spec, labels=toy.labels).fit(seed)
    with pytest.raises(OcrrError, match="dimension 5.*fitted on dimension 16"):
        system.predict(Batch(np.ones((1, 5), np.float32)))
    bad = new.vecs[:2].copy()
    bad[1, 3] = np.nan
    with pytest.raises(OcrrError, match="row 1 contains NaN"):
        system.correct(Batch(bad, None, list(new.labels[:2])))


@pytest.mark.parametrize(
    "spec",
    [
        "ewc:ewc_lambda=-1",
        "a_gem:memory_size=-5",
        "lwf:temperature=0",
        "knn_lm:knn_lambda=1.5",
        "knn_lm:k=0",
        "river_logreg:lr=0",
        "river_ovr_balanced:warm_sample=-1",
    ],
)
def test_bad_hyperparameters_name_the_fix(spec):
    with pytest.raises(OcrrError, match="must be"):
        make_system(spec)


# -- EWC ---------------------------------------------------------------------------------------


def test_fisher_is_the_mean_squared_predicted_class_score(toy):
    head = torch.nn.Linear(16, 12)
    x = torch.from_numpy(toy.train.vecs[:40])
    fw, fb = predicted_class_fisher(head, x)
    sq_w, sq_b = torch.zeros_like(head.weight), torch.zeros_like(head.bias)
    for row in x:
        head.zero_grad()
        logp = F.log_softmax(head(row[None]), dim=1)[0]
        logp[logp.argmax()].backward()
        sq_w += head.weight.grad.square()
        sq_b += head.bias.grad.square()
    assert torch.allclose(fw, sq_w / len(x), atol=1e-7, rtol=1e-4)
    assert torch.allclose(fb, sq_b / len(x), atol=1e-7, rtol=1e-4)


def test_ewc_with_lambda_zero_is_online_linear(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    ewc = make_system("ewc:ewc_lambda=0", labels=toy.labels, seed=4).fit(seed)
    # Same name -> same derived generator -> same seed head and same rows for new labels.
    lin = OnlineLinear(name=ewc.name, labels=toy.labels, seed=4).fit(seed)
    extra = Batch(new.vecs[:3], None, ["extra_label"] * 3)
    for system in (ewc, lin):
        system.correct(new)
        system.correct(extra)
    assert torch.equal(ewc.head_.weight, lin.head_.weight) and torch.equal(ewc.head_.bias, lin.head_.bias)
    assert ewc.predict(old_test) + ewc.predict(new_test) == lin.predict(old_test) + lin.predict(new_test)


def test_ewc_with_huge_lambda_keeps_fisher_weighted_parameters(toy):
    seed, new, old_test, _ = seed_and_new(toy, 8)
    ewc = make_system("ewc:ewc_lambda=1e9", labels=toy.labels, seed=1).fit(seed)
    lin = OnlineLinear(name=ewc.name, labels=toy.labels, seed=1).fit(seed)
    assert ewc.capped_parameters() > 0  # plain SGD would diverge here; the capped pull does not

    @torch.no_grad()
    def drift(system):  # sum F (theta - theta*)^2: how far the protected directions moved
        return float(
            (ewc.fisher_w_ * (system.head_.weight - ewc.anchor_w_).square()).sum()
            + (ewc.fisher_b_ * (system.head_.bias - ewc.anchor_b_).square()).sum()
        )

    for _ in range(3):
        ewc.correct(new)
        lin.correct(new)
    assert drift(lin) > 0
    assert drift(ewc) < 0.01 * drift(lin)
    assert acc(ewc, old_test) >= acc(lin, old_test)


def test_ewc_step_is_sgd_on_ce_plus_penalty(toy):
    seed, new, _, _ = seed_and_new(toy, 8)
    ewc = make_system("ewc:ewc_lambda=50", labels=toy.labels, seed=0).fit(seed)
    assert ewc.capped_parameters() == 0
    ewc.correct(new[:5])  # move away from the anchor so the penalty has a gradient
    w = ewc.head_.weight.detach().clone().requires_grad_()
    b = ewc.head_.bias.detach().clone().requires_grad_()
    x = torch.from_numpy(new.vecs[5:6])
    y = torch.from_numpy(ewc.space_.encode(new.labels[5:6]))
    penalty = (
        0.5 * 50 * ((ewc.fisher_w_ * (w - ewc.anchor_w_) ** 2).sum() + (ewc.fisher_b_ * (b - ewc.anchor_b_) ** 2).sum())
    )
    assert float(penalty.detach()) > 0
    (F.cross_entropy(x @ w.T + b, y) + penalty).backward()
    ewc.correct(new[5:6])
    assert torch.allclose(ewc.head_.weight, w - ewc.lr * w.grad, atol=1e-7)
    assert torch.allclose(ewc.head_.bias, b - ewc.lr * b.grad, atol=1e-7)


# -- A-GEM -------------------------------------------------------------------------------------


def test_agem_projection_removes_only_the_conflicting_component():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        g, g_mem = (
            torch.randn(50, generator=gen, dtype=torch.float64),
            torch.randn(50, generator=gen, dtype=torch.float64),
        )
        out = agem_project(g, g_mem)
        if torch.dot(g, g_mem) < 0:
            assert torch.dot(out, g_mem) >= -1e-12 * g.norm() * g_mem.norm()
            assert torch.allclose(out + (torch.dot(g, g_mem) / g_mem.dot(g_mem)) * g_mem, g)
        else:
            assert torch.equal(out, g)


def agem_step_check(toy, label_of_item):
    """Correct one memory item with the given label; return (raw g.g_mem, applied step, g, g_mem)."""
    seed, _, _, _ = seed_and_new(toy, 8)
    agem = make_system("a_gem:memory_batch=100000:lr=0.5", labels=toy.labels, seed=0).fit(seed)
    assert len(agem.memory_y_) == len(seed)  # fewer seed items than memory_size: all kept
    item = Batch(seed.vecs[:1], None, [label_of_item(seed.labels[0])])
    theta = flat_params(agem.head_)
    x = torch.from_numpy(item.vecs)
    g = flat_grad(theta, x, torch.from_numpy(agem.space_.encode(item.labels)))
    g_mem = flat_grad(theta, agem.memory_x_, agem.memory_y_)  # the batch is the whole memory
    agem.correct(item)
    step = flat_params(agem.head_) - theta
    return float(torch.dot(g, g_mem)), step, g, g_mem, agem.lr


def test_agem_conflicting_step_does_not_increase_memory_loss_to_first_order(toy):
    other = lambda label: "class_03" if label != "class_03" else "class_04"  # noqa: E731
    dot, step, g, g_mem, lr = agem_step_check(toy, other)
    assert dot < 0  # a seed item relabelled: the correction fights the memory
    tol = 1e-5 * float(g.norm() * g_mem.norm())
    assert float(torch.dot(-step / lr, g_mem)) >= -tol  # projected g . g_mem >= 0
    assert float(torch.dot(step, g_mem)) <= tol  # first-order change of memory loss <= 0
    assert float(torch.dot(-lr * g, g_mem)) > 0  # plain SGD would have raised it
    assert torch.allclose(step, -lr * agem_project(g, g_mem), atol=1e-6)


def test_agem_non_conflicting_step_is_plain_sgd(toy):
    dot, step, g, g_mem, lr = agem_step_check(toy, lambda label: label)
    assert dot > 0
    assert torch.allclose(step, -lr * g, atol=1e-7)


def test_reservoir_memory_is_uniform_and_deterministic():
    rng = lambda s: np.random.default_rng(s)  # noqa: E731
    assert np.array_equal(reservoir_indices(50, 10, rng(1)), reservoir_indices(50, 10, rng(1)))
    assert np.array_equal(reservoir_indices(7, 10, rng(1)), np.arange(7))
    counts = np.zeros(20)
    for s in range(4000):
        keep = reservoir_indices(20, 5, rng(s))
        assert len(set(keep.tolist())) == 5
        counts[keep] += 1
    assert np.all(np.abs(counts / 4000 - 0.25) < 0.035)


def test_agem_footprint_counts_memory(toy):
    seed, _, _, _ = seed_and_new(toy, 8)
    agem = make_system("a_gem:memory_size=50", labels=toy.labels).fit(seed)
    assert agem.footprint().entries == 50
    assert len(set(map(tuple, agem.memory_x_.numpy().tolist()))) == 50  # distinct seed items


# -- LwF ---------------------------------------------------------------------------------------


def test_lwf_distillation_is_zero_until_the_student_moves(toy):
    seed, new, old_test, _ = seed_and_new(toy, 8)
    lwf = make_system("lwf", labels=toy.labels, seed=0).fit(seed)
    x_old, x_new = torch.from_numpy(old_test.vecs), torch.from_numpy(new.vecs)
    with torch.no_grad():
        assert float(lwf.distillation_loss(x_old)) == 0.0
        assert float(lwf.distillation_loss(x_new)) == 0.0
    lwf.correct(new[:20])
    with torch.no_grad():
        assert float(lwf.distillation_loss(x_old)) > 0
        assert float(lwf.distillation_loss(x_new)) > 0


def test_lwf_distillation_holds_the_student_near_the_teacher(toy):
    seed, new, old_test, _ = seed_and_new(toy, 8)
    lwf = make_system("lwf:lwf_lambda=10", labels=toy.labels, seed=0).fit(seed)
    plain = LwF(lwf_lambda=0, name=lwf.name, labels=toy.labels, seed=0).fit(seed)  # same name: same seed head
    for system in (lwf, plain):
        system.correct(new)
    x_old = torch.from_numpy(old_test.vecs)
    with torch.no_grad():
        assert float(lwf.distillation_loss(x_old)) < 0.5 * float(plain.distillation_loss(x_old))


# -- knn_lm ------------------------------------------------------------------------------------


def test_knn_lm_lambda_zero_is_the_frozen_head(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    knn = make_system("knn_lm:knn_lambda=0", labels=toy.labels, seed=0).fit(seed)
    w = knn.head_.weight.detach().clone()
    knn.correct(new)
    assert torch.equal(knn.head_.weight, w)  # corrections never touch the head
    for batch in (old_test, new_test):
        with torch.no_grad():
            head = knn.head_(torch.from_numpy(batch.vecs)).argmax(dim=1).numpy()
        assert knn.predict(batch) == knn.space_.decode(head)
    assert acc(knn, new_test) == 0.0  # the seed head never learned the novel classes


def brute_knn_vote(store_vecs, store_labels, queries, k=5, tau=0.1):
    out = []
    for q in queries:
        sims = store_vecs @ q
        top = np.argsort(-sims, kind="stable")[:k]
        w = np.exp((sims[top] - sims[top].max()) / tau)
        votes = {}
        for i, wi in zip(top, w / w.sum()):
            votes[store_labels[i]] = votes.get(store_labels[i], 0.0) + wi
        out.append(max(votes, key=votes.get))
    return out


def test_knn_lm_lambda_one_is_the_knn_softmax_vote(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    knn = make_system("knn_lm:knn_lambda=1", labels=toy.labels, seed=0).fit(seed)
    knn.correct(new[:20])
    store = np.concatenate([seed.vecs, new.vecs[:20]])
    labels = list(seed.labels) + list(new.labels[:20])
    queries = np.concatenate([old_test.vecs, new_test.vecs])
    assert knn.predict(Batch(queries)) == brute_knn_vote(store, labels, queries)


def test_knn_lm_corrections_grow_the_datastore_not_the_head(toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    knn = make_system("knn_lm", labels=toy.labels, seed=0).fit(seed)
    before = knn.footprint()
    assert before.entries == len(seed)
    knn.correct(new)
    after = knn.footprint()
    assert after.entries == len(seed) + len(new)
    assert after.params == before.params
    assert acc(knn, new_test) > 0.9 and acc(knn, old_test) > 0.9


def test_knn_lm_incremental_evaluation_equals_a_fresh_system():
    ds = clustered_dataset(n_classes=20, dim=32, n_train=40, noise=0.3, seed=5)
    seed, new, old_test, new_test = seed_and_new(ds, 10)
    evalset = Batch(np.concatenate([old_test.vecs, new_test.vecs]))
    live = make_system("knn_lm", labels=ds.labels).fit(seed)
    for lo in range(0, len(new), 97):
        live.predict(evalset)  # warms the incremental search cache
        live.correct(new[lo : lo + 97])
        fresh = make_system("knn_lm", labels=ds.labels).fit(seed)
        fresh.correct(new[: lo + 97])
        assert live.predict(evalset) == fresh.predict(evalset)


# -- river -------------------------------------------------------------------------------------


def random_queries(n, dim, seed=0):
    q = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


@pytest.mark.parametrize("spec", RIVER)
def test_river_batched_scoring_equals_predict_one(spec, toy):
    seed, new, old_test, new_test = seed_and_new(toy, 8)
    system = make_system(spec, labels=toy.labels, seed=0).fit(seed)
    checked = 0
    for lo in (0, 40, 80):  # after each round of corrections (new classes appear in them)
        system.correct(new[lo : lo + 40])
        queries = np.concatenate([random_queries(300, 16, seed=lo), old_test.vecs, new_test.vecs])
        classes, proba = system.predict_proba(Batch(queries))
        predicted = system.predict(Batch(queries))
        for q, row, label in zip(queries, proba, predicted):
            x = as_features(q)
            one = system.model_.predict_proba_one(x)
            assert list(one) == classes
            assert np.allclose(row, list(one.values()), rtol=1e-9, atol=1e-12)
            assert label == system.model_.predict_one(x)
            checked += 1
    assert checked == 3 * (300 + len(old_test) + len(new_test))


def test_river_logreg_is_rivers_one_vs_rest_over_a_seed_subsample(toy):
    from river import linear_model, multiclass, optim

    seed, _, _, _ = seed_and_new(toy, 8)
    system = make_system("river_logreg:subsample=50", labels=toy.labels, seed=0).fit(seed)
    assert isinstance(system.model_, multiclass.OneVsRestClassifier)
    assert isinstance(system.model_.classifier, linear_model.LogisticRegression)
    assert isinstance(system.model_.classifier.optimizer, optim.SGD)
    assert system.model_.classifier.optimizer.learning_rate == 0.01
    first = seed.labels[system.subsample_idx_[0]]
    assert system.model_.classifiers[first].optimizer.n_iterations == 50  # one learn_one per subsample item
    other = make_system("river_logreg:subsample=50", labels=toy.labels, seed=1).fit(seed)
    assert not np.array_equal(system.subsample_idx_, other.subsample_idx_)


def share_won_by_a_new_label(spec, ds):
    """Fit on 8 classes, correct ONE item of a new class, return the share of all test
    queries (every class) predicted as that new class."""
    seed, new, old_test, new_test = seed_and_new(ds, 8)
    system = make_system(spec, labels=ds.labels, seed=0).fit(seed)
    system.correct(new[:1])
    queries = Batch(np.concatenate([old_test.vecs, new_test.vecs]))
    return float(np.mean([p == new.labels[0] for p in system.predict(queries)])), acc(system, old_test)


def test_river_logreg_reproduces_the_one_vs_rest_artefact():
    ds = clustered_dataset(n_classes=12, dim=32, n_train=60, noise=0.1, seed=2)
    share, old_acc = share_won_by_a_new_label("river_logreg", ds)
    assert share == 1.0  # one positive-only binary model outscores every seed model everywhere
    assert old_acc == 0.0


@pytest.mark.parametrize("spec", ["river_softmax", "river_ovr_balanced"])
def test_fair_river_baselines_do_not_let_a_new_class_win_everything(spec):
    ds = clustered_dataset(n_classes=12, dim=32, n_train=60, noise=0.1, seed=2)
    share, old_acc = share_won_by_a_new_label(spec, ds)
    assert share < 0.2  # its own class is 1/12 of the queries
    assert old_acc > 0.8


def test_balanced_ovr_is_river_logreg_until_a_new_class_appears(toy):
    seed, new, old_test, _ = seed_and_new(toy, 8)
    plain = make_system("river_logreg", labels=toy.labels, seed=3).fit(seed)
    balanced = make_system("river_ovr_balanced:warm_sample=100", labels=toy.labels, seed=3).fit(seed)
    assert plain.predict(old_test) == balanced.predict(old_test)  # same subsample, same seed pass
    balanced.correct(new[:1])
    fresh = balanced.model_.classifiers[new.labels[0]]
    assert fresh.optimizer.n_iterations == 100 + 1  # 100 replayed negatives, then the positive
    assert fresh.intercept < 0  # not positive-only: it starts below p = 0.5
    assert balanced.footprint().entries == 100
