"""The numpy mirrors of river's SGD models learn exactly as river does, bit for bit."""

import copy
import math

import numpy as np
import pytest
from river import linear_model, multiclass, optim
from tests.conftest import clustered_dataset

from ocrr.systems import Batch, make_system
from ocrr.systems.river import mirror as river_mirror
from ocrr.systems.river.classifiers import RiverSystem, as_features
from ocrr.systems.river.mirror import OvRLogRegMirror, SoftmaxMirror


def river_ovr(lr=0.01, **kwargs):
    return multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(lr), **kwargs))


def river_softmax(lr=0.01, **kwargs):
    return linear_model.SoftmaxRegression(optimizer=optim.SGD(lr), **kwargs)


def assert_same_state(river_model, mirror):
    theirs = type(mirror).from_river(river_model, mirror.dim)
    assert theirs.classes == mirror.classes
    assert theirs.weights_t.tobytes() == mirror.weights_t.tobytes()
    assert theirs.intercepts.tobytes() == mirror.intercepts.tobytes()
    assert theirs.steps == mirror.steps


def stream(n, dim, n_classes, seed, scales=(0.05, 1.0)):
    """Rows of mixed scales (float32, as embeddings are) and labels, classes first met late."""
    rng = np.random.default_rng(seed)
    xs = (rng.standard_normal((n, dim)) * rng.choice(scales, size=(n, 1))).astype(np.float32)
    labels = [f"c{min(int(k), i // 4)}" for i, k in enumerate(rng.integers(0, n_classes, n))]
    return xs, labels


@pytest.mark.parametrize(
    ("lr", "scales", "n_classes"),
    [
        (0.01, (0.05, 1.0), 40),  # the paper's setting, embedding-like rows
        (5.0, (1.0, 30.0), 6),  # saturating: both |z| > 18 branches of the loss gradient
        (0.3, (0.5,), 1),  # one class: a one-column running sum
    ],
)
def test_mirror_learns_as_river_does(lr, scales, n_classes):
    dim = 384 if n_classes == 40 else 24
    xs, labels = stream(240, dim, n_classes, seed=n_classes, scales=scales)
    river_model = river_ovr(lr)
    mirror = OvRLogRegMirror(river_model, dim)
    saturated = 0
    for x, label in zip(xs, labels):
        z = mirror.weights_t.T @ x + mirror.intercepts
        saturated += int(np.sum(np.abs(z) > 18.0))
        river_model.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    assert_same_state(river_model, mirror)
    assert len(mirror.classes) == min(n_classes, 60)
    if lr == 5.0:
        assert saturated > 100  # the large-|z| branches were exercised


@pytest.mark.parametrize(
    ("lr", "scales", "n_classes"),
    [
        (0.01, (0.05, 1.0), 40),  # the preset's setting, embedding-like rows
        (5.0, (1.0, 30.0), 6),  # probabilities clamped at 1e-15 and 1 - 1e-15
        (0.3, (0.5,), 1),  # one class: a one-column running sum, a softmax of one
    ],
)
def test_softmax_mirror_learns_as_river_does(lr, scales, n_classes):
    dim = 384 if n_classes == 40 else 24
    xs, labels = stream(240, dim, n_classes, seed=n_classes, scales=scales)
    river_model = river_softmax(lr)
    mirror = SoftmaxMirror(river_model, dim)
    for x, label in zip(xs, labels):
        river_model.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    assert_same_state(river_model, mirror)
    assert list(river_model.weights) == mirror.classes
    assert len(mirror.classes) == min(n_classes, 60)


def test_negatives_for_one_class_are_rivers_binary_learn_one():
    dim = 48
    xs, labels = stream(60, dim, 5, seed=1)
    river_model, warm = river_ovr(), xs[:30]
    mirror = OvRLogRegMirror(river_model, dim)
    for x, label in zip(xs, labels):
        river_model.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    river_model.classifiers["new"] = river_model.classifier.clone()
    for x in warm:
        river_model.classifiers["new"].learn_one(as_features(x), False)
    mirror.add_class("new")
    mirror.learn_negatives("new", warm.astype(np.float64))
    assert_same_state(river_model, mirror)
    assert mirror.steps[-1] == 30


@pytest.mark.parametrize(("mirror_class", "model"), [(OvRLogRegMirror, river_ovr), (SoftmaxMirror, river_softmax)])
def test_a_materialised_river_model_learns_on_exactly_like_the_mirror(mirror_class, model):
    dim = 32
    xs, labels = stream(120, dim, 7, seed=4)
    mirror = mirror_class(model(0.05), dim)
    for x, label in zip(xs[:60], labels[:60]):
        mirror.learn_one(x.astype(np.float64), label)
    materialised = mirror.to_river()
    assert mirror_class.supports(materialised)
    for x, label in zip(xs[60:], labels[60:]):
        materialised.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    assert_same_state(materialised, mirror)


@pytest.mark.parametrize(
    "model",
    [
        river_ovr(l2=0.01),
        river_ovr(loss=optim.losses.Hinge()),
        multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.Adam(0.01))),
        linear_model.SoftmaxRegression(),
    ],
    ids=["l2", "hinge", "adam", "softmax"],
)
def test_other_river_models_are_not_mirrored(model):
    assert OvRLogRegMirror.supports(river_ovr())
    assert not OvRLogRegMirror.supports(model)


@pytest.mark.parametrize(
    "model",
    [
        river_softmax(l2=0.01),
        river_softmax(loss=optim.losses.CrossEntropy(class_weight={"a": 2.0})),
        linear_model.SoftmaxRegression(optimizer=optim.Adam(0.01)),
        river_ovr(),
    ],
    ids=["l2", "class-weight", "adam", "ovr"],
)
def test_other_models_are_not_mirrored_as_softmax(model):
    assert SoftmaxMirror.supports(river_softmax())
    assert not SoftmaxMirror.supports(model)


def compensated_sum(values):
    """CPython 3.12's ``sum()`` of floats (Objects/bltinmodule.c), step for step: the int 0
    plus the first, then Neumaier's compensated loop."""
    it = iter(values)
    first = next(it, None)
    if first is None:
        return 0
    f, c = 0 + first, 0.0
    for x in it:
        t = f + x
        if abs(f) >= abs(x):
            c += (f - t) + x
        else:
            c += (x - t) + f
        f = t
    if c and math.isfinite(c):
        f += c
    return f


def compensated_dot(x, y):  # river.utils.math.dot as it adds on Python 3.12+
    if len(x) < len(y):
        return compensated_sum(xi * y[i] for i, xi in x.items() if i in y)
    return compensated_sum(x[i] * yi for i, yi in y.items() if i in x)


@pytest.mark.parametrize("n_classes", [1, 2, 40])
def test_compensated_dots_add_as_python_312_sum_does(n_classes):
    rng = np.random.default_rng(n_classes)
    w = rng.standard_normal((384, n_classes)) * rng.choice([1e-6, 1.0, 1e6], size=(384, n_classes))
    w[:7] = -0.0  # products of -0.0 first: sum() starts from the int 0
    w[200] = -w[199]  # exact cancellations
    x = rng.standard_normal(384)
    mirror = SoftmaxMirror(river_softmax(), 384)
    expected = [compensated_sum((w[:, j] * x).tolist()) for j in range(n_classes)]
    if river_mirror.SUM_COMPENSATES:  # the reference is this Python's own sum()
        assert expected == [sum((w[:, j] * x).tolist()) for j in range(n_classes)]
    got = mirror._compensated_dots(w, x)
    assert got.tobytes() == np.array(expected).tobytes()
    assert (got != mirror._dots(w, x)).any()  # the compensation shows in these sums


@pytest.mark.parametrize(
    ("lr", "scales", "n_classes", "compensates"),
    [
        (0.01, (0.05, 1.0), 40, True),  # the preset's setting
        (5.0, (1.0, 30.0), 6, True),  # clamped probabilities
        (0.01, (0.05, 1.0), 40, False),  # the plain dots: their last bits show in the weights
    ],
)
def test_softmax_mirror_follows_a_compensating_sum(lr, scales, n_classes, compensates, monkeypatch):
    """river on Python 3.12+ (its dot a compensated sum()), on any Python: the mirror learns
    as it does only when it compensates too."""
    from river import utils

    monkeypatch.setattr(utils.math, "dot", compensated_dot)
    monkeypatch.setattr(river_mirror, "SUM_COMPENSATES", compensates)
    xs, labels = stream(240, 384, n_classes, seed=n_classes, scales=scales)
    river_model = river_softmax(lr)
    mirror = SoftmaxMirror(river_model, 384)
    for x, label in zip(xs, labels):
        river_model.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    theirs = SoftmaxMirror.from_river(river_model, 384)
    assert theirs.same_state(mirror) is compensates


def test_the_self_checks_pass_here():
    river_mirror._AGREES_WITH_RIVER.clear()
    assert OvRLogRegMirror.matches_river() and SoftmaxMirror.matches_river()


def numpy_softmax(z):  # numpy's exp and pairwise sum, not river's loop
    e = np.exp(np.array(z) - max(z))
    return list(e / e.sum())


def pairwise_dot_step(self, cols, x, targets):  # numpy's pairwise sum, not river's loop
    w = self.weights_t[:, cols]
    z = np.sum(w * x[:, None], axis=0) + self.intercepts[cols]
    g = np.array([self._loss_gradient(zc, y) for zc, y in zip(z.tolist(), targets)])
    self.intercepts[cols] -= self.intercept_lr * g
    w -= self.lr * (x[:, None] * g)


@pytest.mark.parametrize(
    ("mirror_class", "owner", "name", "changed"),
    [
        (SoftmaxMirror, river_mirror, "_softmax", numpy_softmax),
        (OvRLogRegMirror, OvRLogRegMirror, "_step", pairwise_dot_step),
    ],
    ids=["softmax", "one-vs-rest"],
)
def test_the_self_check_fails_when_the_arithmetic_differs(mirror_class, owner, name, changed, monkeypatch):
    monkeypatch.setattr(owner, name, changed)
    river_mirror._AGREES_WITH_RIVER.clear()
    try:
        assert not mirror_class.matches_river()
    finally:
        river_mirror._AGREES_WITH_RIVER.clear()


def corrected(spec, ds, use_mirror, monkeypatch):
    monkeypatch.setattr(RiverSystem, "_mirrorable", lambda self, model: use_mirror)
    known = set(ds.labels[:6])
    seed_idx = [i for i, label in enumerate(ds.train.labels) if label in known]
    new_idx = [i for i, label in enumerate(ds.train.labels) if label not in known]
    seed = Batch(ds.train.vecs[seed_idx], labels=[ds.train.labels[i] for i in seed_idx])
    system = make_system(spec, labels=ds.labels, seed=2).fit(seed)
    predictions = []
    for lo in range(0, 90, 30):
        part = new_idx[lo : lo + 30]
        system.correct(Batch(ds.train.vecs[part], labels=[ds.train.labels[i] for i in part]))
        predictions.append(system.predict(Batch(ds.test.vecs)))
        predictions.append(system.uncertainty(Batch(ds.test.vecs)).tobytes())
    return system, predictions


@pytest.mark.parametrize(
    "spec",
    [
        "river_logreg:subsample=200",
        "river_ovr_balanced:subsample=200:warm_sample=50",
        "river_softmax:subsample=200",
        "river_softmax:subsample=100:seed_passes=2",
    ],
)
def test_systems_answer_the_same_with_or_without_the_mirror(spec, monkeypatch):
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    ds = clustered_dataset(n_classes=10, dim=24, n_train=40, seed=5)
    mirrored, with_mirror = corrected(spec, ds, True, monkeypatch)
    plain, without = corrected(spec, ds, False, monkeypatch)
    assert mirrored.mirror_ is not None and plain.mirror_ is None
    assert with_mirror == without
    assert type(mirrored.mirror_).from_river(plain.model_, 24).same_state(mirrored.mirror_)
    assert type(mirrored.mirror_).from_river(mirrored.model_, 24).same_state(mirrored.mirror_)


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("river_logreg", multiclass.OneVsRestClassifier), ("river_softmax", linear_model.SoftmaxRegression)],
)
def test_a_river_that_computes_differently_is_used_directly(spec, kind, monkeypatch):
    for mirror_class in (OvRLogRegMirror, SoftmaxMirror):
        monkeypatch.setattr(mirror_class, "matches_river", classmethod(lambda cls: False))
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    ds = clustered_dataset(n_classes=6, dim=16, n_train=20, seed=1)
    system = make_system(f"{spec}:subsample=40", labels=ds.labels, seed=0)
    system.fit(Batch(ds.train.vecs, labels=ds.train.labels))
    system.correct(Batch(ds.train.vecs[:5], labels=ds.train.labels[:5]))
    assert system.mirror_ is None
    assert isinstance(system.model_, kind)


@pytest.mark.parametrize("mirrored", [True, False])
def test_balanced_ovr_learns_the_corrected_item_after_replaying_negatives(mirrored, monkeypatch):
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    monkeypatch.setattr(RiverSystem, "_mirrorable", lambda self, model: mirrored)
    ds = clustered_dataset(n_classes=6, dim=16, n_train=20, seed=3)
    seed_idx = [i for i, label in enumerate(ds.train.labels) if label != ds.labels[5]]
    seed = Batch(ds.train.vecs[seed_idx], labels=[ds.train.labels[i] for i in seed_idx])
    system = make_system("river_ovr_balanced:warm_sample=20", labels=ds.labels, seed=3).fit(seed)
    expected = copy.deepcopy(system.model_)
    new = next(i for i, label in enumerate(ds.train.labels) if label == ds.labels[5])
    label = ds.labels[5]
    expected.classifiers[label] = expected.classifier.clone()
    for warm in system.warm_vecs_:
        expected.classifiers[label].learn_one(as_features(warm), False)
    expected.learn_one(as_features(ds.train.vecs[new]), label)  # the corrected item, as the positive
    system.correct(Batch(ds.train.vecs[[new]], labels=[label]))
    assert list(system.model_.classifiers) == list(expected.classifiers)
    for name, clf in expected.classifiers.items():
        assert system.model_.classifiers[name].weights == clf.weights
        assert system.model_.classifiers[name].intercept == clf.intercept
