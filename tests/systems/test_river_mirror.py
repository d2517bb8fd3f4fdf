"""The numpy mirror of river's one-vs-rest SGD learns exactly as river does, bit for bit."""

import copy

import numpy as np
import pytest
from river import linear_model, multiclass, optim
from tests.conftest import clustered_dataset

from ocrr.systems import Batch, make_system, river_mirror
from ocrr.systems.river_mirror import OvRLogRegMirror, mirror_matches_river
from ocrr.systems.river_systems import RiverLogReg, as_features


def river_ovr(lr=0.01, **kwargs):
    return multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(lr), **kwargs))


def assert_same_state(river_model, mirror):
    theirs = OvRLogRegMirror.from_river(river_model, mirror.dim)
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


def test_a_materialised_river_model_learns_on_exactly_like_the_mirror():
    dim = 32
    xs, labels = stream(120, dim, 7, seed=4)
    mirror = OvRLogRegMirror(river_ovr(0.05), dim)
    for x, label in zip(xs[:60], labels[:60]):
        mirror.learn_one(x.astype(np.float64), label)
    materialised = mirror.to_river()
    assert OvRLogRegMirror.supports(materialised)
    for x, label in zip(xs[60:], labels[60:]):
        materialised.learn_one(as_features(x), label)
        mirror.learn_one(x.astype(np.float64), label)
    assert_same_state(materialised, mirror)
    assert [c.optimizer.n_iterations for c in materialised.classifiers.values()] == mirror.steps


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


def test_the_self_check_fails_when_the_arithmetic_differs(monkeypatch):
    mirror_matches_river.cache_clear()
    assert mirror_matches_river()

    def pairwise_dot_step(self, cols, x, targets):  # numpy's pairwise sum, not river's loop
        w = self.weights_t[:, cols]
        z = np.sum(w * x[:, None], axis=0) + self.intercepts[cols]
        g = np.array([self._loss_gradient(zc, y) for zc, y in zip(z.tolist(), targets)])
        self.intercepts[cols] -= self.intercept_lr * g
        w -= self.lr * (x[:, None] * g)

    monkeypatch.setattr(OvRLogRegMirror, "_step", pairwise_dot_step)
    mirror_matches_river.cache_clear()
    try:
        assert not mirror_matches_river()
    finally:
        mirror_matches_river.cache_clear()


def corrected(spec, ds, use_mirror, monkeypatch):
    monkeypatch.setattr(RiverLogReg, "_mirrorable", staticmethod(lambda model: use_mirror))
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


@pytest.mark.parametrize("spec", ["river_logreg:subsample=200", "river_ovr_balanced:subsample=200:warm_sample=50"])
def test_systems_answer_the_same_with_or_without_the_mirror(spec, monkeypatch):
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    ds = clustered_dataset(n_classes=10, dim=24, n_train=40, seed=5)
    mirrored, with_mirror = corrected(spec, ds, True, monkeypatch)
    plain, without = corrected(spec, ds, False, monkeypatch)
    assert mirrored.mirror_ is not None and plain.mirror_ is None
    assert with_mirror == without
    for label, clf in plain.model_.classifiers.items():
        twin = mirrored.model_.classifiers[label]
        assert twin.weights == clf.weights and twin.intercept == clf.intercept
        assert twin.optimizer.n_iterations == clf.optimizer.n_iterations
    assert list(mirrored.model_.classifiers) == list(plain.model_.classifiers)


def test_a_river_that_computes_differently_is_used_directly(monkeypatch):
    monkeypatch.setattr(river_mirror, "mirror_matches_river", lambda: False)
    monkeypatch.setattr("ocrr.systems.river_systems.mirror_matches_river", lambda: False)
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    ds = clustered_dataset(n_classes=6, dim=16, n_train=20, seed=1)
    system = make_system("river_logreg:subsample=40", labels=ds.labels, seed=0)
    system.fit(Batch(ds.train.vecs, labels=ds.train.labels))
    assert system.mirror_ is None
    assert isinstance(system.model_, multiclass.OneVsRestClassifier)


@pytest.mark.parametrize("mirrored", [True, False])
def test_balanced_ovr_learns_the_corrected_item_after_replaying_negatives(mirrored, monkeypatch):
    monkeypatch.setenv("OCRR_NO_FIT_CACHE", "1")
    monkeypatch.setattr(RiverLogReg, "_mirrorable", staticmethod(lambda model: mirrored))
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
