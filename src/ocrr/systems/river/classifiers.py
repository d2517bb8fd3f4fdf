"""Online-ML baselines from the river library (paper 4.2), and fair variants of it.

river_logreg reproduces the paper's configuration: OneVsRestClassifier(LogisticRegression(
optimizer=SGD(0.01))), one ``learn_one`` pass over a 3000-item random subsample of the
seed set (in the random order the subsample is drawn in, not seed-set order: seed sets
list classes in blocks), then ``learn_one`` per corrected item.

Its published 0.000 original accuracy is an artefact of one-vs-rest in a stream: a class
first met in a correction gets a fresh binary model whose only example is that positive,
so it scores p > 0.5 on nearly everything while the seed classes' models, trained on
~98% negatives, score well below; it wins every query. Two fair baselines sit beside it:

- river_softmax: river's SoftmaxRegression (multinomial, one shared normalisation), same
  optimiser, lr, subsample and single pass.
- river_ovr_balanced: the same one-vs-rest model (same subsample, so the same seed
  state), but it keeps the first ``warm_sample`` items of the seed subsample (default
  3000: all of it) and, when a new class appears, first trains the new class's binary
  model on them as negatives (one ``learn_one`` each, in the order the seed models saw
  them): the new model starts as if the class had been declared before the seed pass
  and had no seed items, instead of positive-only. A small sample is not enough on
  Banking77: with 500 replayed negatives the new models still win every original query
  (0.000 original, seed 0), because the seed models' intercepts came from 3000 steps.

All three learn through ``river_mirror``: river's own SGD arithmetic in numpy, bit for
bit, checked against the installed river once per process (another river model, or a
river that computes differently, learns through river itself). ``model_`` is river's
model in the same state.

Prediction is batched: river scores one dict at a time (slow at 77 classes x 384
features: docs/reference/measurements.md), so the models' weights are read into a numpy matrix after each learning
step and queries are scored with the same formula river's ``predict_one`` uses (tests
check ``predict == predict_one``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.specs import Option
from ocrr.systems.base import Footprint, System, check_vectors, require_labels
from ocrr.systems.fit_cache import cached_fit
from ocrr.systems.river.mirror import OvRLogRegMirror, RiverMirror, SoftmaxMirror
from ocrr.systems.seeds import derive_seed

if TYPE_CHECKING:  # river itself is imported when a model is built (_river)
    from river.base import Classifier
    from river.linear_model import SoftmaxRegression
    from river.multiclass import OneVsRestClassifier


def as_features(vec: np.ndarray) -> dict[Hashable, float]:
    """One vector as river's feature dict {i: x_i} (Python floats, exact from float32)."""
    features: dict[Hashable, float] = dict(enumerate(vec.tolist()))
    return features


def _river():
    try:
        from river import linear_model, multiclass, optim
    except ImportError:  # pragma: no cover - river is a declared dependency
        raise OcrrError("the river baselines need the river package: pip install river") from None
    return linear_model, multiclass, optim


class RiverSystem(System):
    """Shared machinery: seed subsample, learn_one loop, cached numpy weights, prediction."""

    family = "online-ml"
    has_intercept = True
    mirror_class: ClassVar[type[RiverMirror]]  # learns as river does, in numpy
    options = {
        "lr": Option(0.01, float, gt=0, help="river SGD learning rate"),
        "subsample": Option(3000, int, low=0, help="seed items of the seed pass (a seeded sample)"),
        "seed_passes": Option(1, int, low=0, help="passes over the subsample"),
    }
    default_name = "river"  # (labels: river learns classes as it meets them; kept for the common signature)
    _model: Classifier | None = None
    # Learns for river when the mirror reproduces this river exactly; None otherwise.
    mirror_: RiverMirror | None = None

    @property
    def model_(self) -> Classifier | None:
        """The river model as it stands (None before ``fit``)."""
        if self._model is None and self.mirror_ is not None:
            self._model = self.mirror_.to_river()  # built when read: learning never needs it
        return self._model

    # -- learning (river) ---------------------------------------------------------------
    def _make_model(self) -> Classifier:
        raise NotImplementedError

    def _fitted_model(self) -> Classifier:
        """``model_``, which ``fit`` has set."""
        model = self.model_
        assert model is not None, "fit() sets the model"
        return model

    def fit(self, seed: Batch) -> RiverSystem:
        labels = require_labels(seed, self.name)
        vecs = check_vectors(seed.vecs, None, "seed vectors")
        self.dim_ = vecs.shape[1]
        # One key for every river variant: they start from the same subsample (paired rows).
        rng = np.random.default_rng(derive_seed(self.seed, "river/subsample"))
        self.subsample_idx_ = rng.choice(len(vecs), size=min(self.subsample, len(vecs)), replace=False)
        self._start_from(cached_fit("river", self._seed_key(vecs, labels), lambda: self._seed_pass(vecs, labels)))
        self._dirty = True
        self._after_seed(vecs, labels)
        return self

    def _mirrorable(self, model: Classifier) -> bool:
        return self.mirror_class.supports(model) and self.mirror_class.matches_river()

    def _seed_pass(self, vecs: np.ndarray, labels) -> Classifier:
        """The seed pass itself: learn_one over the subsample, ``seed_passes`` times."""
        model = self._make_model()
        order = self.subsample_idx_.tolist() * self.seed_passes
        if not self._mirrorable(model):
            for i in order:
                model.learn_one(as_features(vecs[i]), labels[i])
            return model
        mirror = self.mirror_class.from_river(model, vecs.shape[1])
        for i in order:
            mirror.learn_one(vecs[i].astype(np.float64), labels[i])
        return mirror.to_river()  # the cache keeps river's model

    def _start_from(self, model: Classifier) -> None:
        """Take the seed pass's model (fresh or from the cache) as the state to learn on."""
        if self._mirrorable(model):
            self.mirror_, self._model = self.mirror_class.from_river(model, self.dim_), None
        else:
            self.mirror_, self._model = None, model

    def _seed_key(self, vecs: np.ndarray, labels) -> list:
        """Everything the seed model depends on: river's version, the model's repr (its
        settings), the passes, and the exact subsample in order."""
        import river

        idx = self.subsample_idx_
        return [
            river.__version__,
            repr(self._make_model()),
            str(self.seed_passes),
            np.ascontiguousarray(vecs[idx]).tobytes(),
            "\0".join(labels[i] for i in idx.tolist()),
        ]

    def _after_seed(self, vecs: np.ndarray, labels) -> None:
        """Hook for variants that keep part of the seed set."""

    def _learn(self, vec: np.ndarray, label: str) -> None:
        if self.mirror_ is not None:
            self.mirror_.learn_one(vec.astype(np.float64), label)
            self._model = None  # river's view is stale now
        else:
            self._fitted_model().learn_one(as_features(vec), label)
        self._dirty = True

    def correct(self, batch: Batch) -> None:
        self._require_fitted()
        labels = require_labels(batch, self.name)
        vecs = check_vectors(batch.vecs, self.dim_, "vectors")
        for vec, label in zip(vecs, labels):
            self._learn(vec, label)

    # -- prediction (numpy, river's formula) -------------------------------------------
    def _read_weights(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(classes in river's dict order, W (C, d) float64, b (C,) float64)."""
        raise NotImplementedError

    def _proba(self, z: np.ndarray) -> np.ndarray:
        """River's per-class scores from raw scores z (n, C), as predict_proba_one computes them."""
        raise NotImplementedError

    def raw_scores(self, vecs: np.ndarray) -> tuple[list[str], np.ndarray]:
        if self._dirty:
            mirror = self.mirror_
            if mirror is not None:
                self.classes_, self.w_, self.b_ = list(mirror.classes), mirror.weights(), mirror.intercepts.copy()
            else:
                self.classes_, self.w_, self.b_ = self._read_weights()
            self._dirty = False
        return self.classes_, vecs.astype(np.float64) @ self.w_.T + self.b_

    def predict_proba(self, batch: Batch) -> tuple[list[str], np.ndarray]:
        """Class list and (n, C) probabilities, equal to river's predict_proba_one per row."""
        self._require_fitted()
        classes, z = self.raw_scores(check_vectors(batch.vecs, self.dim_, "query vectors"))
        return classes, self._proba(z)

    def predict(self, batch: Batch) -> list[str | None]:
        classes, p = self.predict_proba(batch)
        if not classes:
            return [None] * len(batch)
        # First maximum in river's class order: what max(dict, key=dict.get) returns.
        return [classes[i] for i in np.argmax(p, axis=1).tolist()]

    def uncertainty(self, batch: Batch) -> np.ndarray:
        """Per item, 1 - river's top class score: higher means less sure (1 with no class yet)."""
        classes, p = self.predict_proba(batch)
        return 1.0 - p.max(axis=1) if classes else np.ones(len(batch))

    def footprint(self) -> Footprint:
        self._require_fitted()
        classes, _ = self.raw_scores(np.zeros((0, self.dim_), np.float32))
        params = len(classes) * (self.dim_ + int(self.has_intercept))
        return Footprint(entries=0, params=params, bytes=8 * params)  # river stores float64


def _fill_row(w: np.ndarray, row: int, weights: dict) -> None:
    """Copy river's {feature index: weight} dict into row ``row`` of w (absent features: 0)."""
    n = len(weights)
    w[row, np.fromiter(weights.keys(), np.int64, n)] = np.fromiter(weights.values(), np.float64, n)


def _sequential_normalise(p: np.ndarray) -> np.ndarray:
    """Divide each row by its sum, accumulated left to right like river's Python loop."""
    total = np.zeros(len(p))
    for j in range(p.shape[1]):
        total += p[:, j]
    return np.divide(p, total[:, None], out=np.full_like(p, 1.0 / max(p.shape[1], 1)), where=total[:, None] != 0)


class RiverLogReg(RiverSystem):
    """river OneVsRestClassifier(LogisticRegression(SGD(lr))): the paper's river baseline."""

    mirror_class = OvRLogRegMirror
    _model: OneVsRestClassifier | None
    mirror_: OvRLogRegMirror | None
    default_name = "river_logreg"

    def _make_model(self) -> OneVsRestClassifier:
        linear_model, multiclass, optim = _river()
        return multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(self.lr)))

    def _fitted_model(self) -> OneVsRestClassifier:
        return cast("OneVsRestClassifier", super()._fitted_model())

    def _read_weights(self):
        from river.linear_model import LogisticRegression

        model = self._fitted_model()
        classes = list(model.classifiers)
        w = np.zeros((len(classes), self.dim_))
        b = np.zeros(len(classes))
        for row, clf in enumerate(model.classifiers.values()):
            assert isinstance(clf, LogisticRegression)  # a clone of _make_model's binary model
            _fill_row(w, row, clf.weights)
            b[row] = clf.intercept
        return classes, w, b

    def _proba(self, z: np.ndarray) -> np.ndarray:
        # river.utils.math.sigmoid: exactly 0 below -30 and 1 above 30, then OvR normalises.
        with np.errstate(over="ignore"):
            p = np.where(z < -30, 0.0, np.where(z > 30, 1.0, 1.0 / (1.0 + np.exp(-z))))
        return _sequential_normalise(p)


class RiverOvRBalanced(RiverLogReg):
    """One-vs-rest whose new-class models first learn ``warm_sample`` stored seed items as negatives."""

    options = {
        "warm_sample": Option(3000, int, low=0, help="stored seed items a new class's model first learns as negatives")
    }
    default_name = "river_ovr_balanced"

    def _after_seed(self, vecs: np.ndarray, labels) -> None:
        # The first warm_sample items of the (already random) subsample: a uniform sample,
        # in the order the seed models learned them.
        self.warm_vecs_ = vecs[self.subsample_idx_[: self.warm_sample]].copy()

    def _learn(self, vec: np.ndarray, label: str) -> None:
        if self.mirror_ is not None:
            if label not in self.mirror_.index:
                self.mirror_.add_class(label)
                self.mirror_.learn_negatives(label, self.warm_vecs_)
        else:
            model = self._fitted_model()
            if label not in model.classifiers:
                clf = model.classifiers[label] = model.classifier.clone()
                for warm in self.warm_vecs_:
                    clf.learn_one(as_features(warm), False)
        super()._learn(vec, label)

    def footprint(self) -> Footprint:
        fp = super().footprint()
        assert self.warm_vecs_ is not None  # set by fit, after the seed pass
        return Footprint(entries=len(self.warm_vecs_), params=fp.params, bytes=fp.bytes + self.warm_vecs_.nbytes)


class RiverSoftmax(RiverSystem):
    """river SoftmaxRegression(SGD(lr)): multinomial, so a new class cannot win by default."""

    has_intercept = False  # river's SoftmaxRegression has none
    mirror_class = SoftmaxMirror
    _model: SoftmaxRegression | None
    default_name = "river_softmax"

    def _make_model(self) -> SoftmaxRegression:
        linear_model, _, optim = _river()
        return linear_model.SoftmaxRegression(optimizer=optim.SGD(self.lr))

    def _fitted_model(self) -> SoftmaxRegression:
        return cast("SoftmaxRegression", super()._fitted_model())

    def _read_weights(self):
        model = self._fitted_model()
        classes = list(model.weights)
        w = np.zeros((len(classes), self.dim_))
        for row, weights in enumerate(model.weights.values()):
            _fill_row(w, row, weights)
        return classes, w, np.zeros(len(classes))  # SoftmaxRegression has no intercept

    def _proba(self, z: np.ndarray) -> np.ndarray:
        if z.shape[1] == 0:
            return z
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return _sequential_normalise(e)
