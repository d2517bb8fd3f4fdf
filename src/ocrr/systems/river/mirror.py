"""river's linear classifiers under SGD, learned in numpy bit for bit.

river learns one dict at a time: a correction to a 77-class one-vs-rest model runs 77
binary ``learn_one`` calls, and reading the weights back for prediction costs as much
again. That made river_logreg the largest share of a sweep's CPU (docs/reference/measurements.md).

The arithmetic of one step is small and fixed (river 0.26). For one-vs-rest logistic
regression (``linear_model.base.GLM._fit`` with ``optim.SGD`` and ``optim.losses.Log``),
per class::

    z  = sum_i w_i * x_i  (left to right, over the features in order) + b
    g  = loss gradient of (y, z)        # math.exp, as river calls it
    b -= intercept_lr * g
    w_i -= lr * (x_i * g)

and for softmax regression (``linear_model.SoftmaxRegression``), the same dot products
(no intercept), river's softmax over the classes met so far, ``p - (y == class)`` as each
class's gradient, and the same update.

A mirror runs the step for every class at once. Weights are stored features x classes,
so numpy's reduction over the features adds the products left to right, as river's loop
does; the elementwise steps round exactly as river's, and what is per class (the loss
gradient, the softmax) stays in Python floats with ``math.exp`` (numpy's vectorised exp
can differ in the last bit). From Python 3.12 on, ``sum()`` of floats compensates
(Neumaier), and river's softmax dot products are ``sum()``s: there the softmax mirror adds
them as that ``sum()`` does (``_compensated_dots``). ``matches_river`` checks a mirror
against the installed river once per process; a river that computes differently (another
version) is used directly instead.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard, cast

import numpy as np

if TYPE_CHECKING:
    from river.base import Classifier
    from river.linear_model import LogisticRegression, SoftmaxRegression
    from river.multiclass import OneVsRestClassifier
    from river.optim.schedulers import Constant


class RiverMirror:
    """What every mirror keeps: ``classes`` in river's order (first met first), their
    weights as (features, classes) float64 ``weights_t``, intercepts (zeros for a model
    without) and ``steps``, each class's optimiser step count."""

    def __init__(self, dim: int):
        self.dim = dim
        self.classes: list[str] = []
        self.index: dict[str, int] = {}
        self.weights_t = np.zeros((dim, 0))
        self.intercepts = np.zeros(0)
        self.steps: list[int] = []
        self.lr = 0.0  # the optimiser's learning rate, set by each mirror from its model
        self._scratch: np.ndarray | None = None

    @staticmethod
    def supports(model: Classifier) -> bool:
        """Whether ``model`` is the configuration this mirror reproduces."""
        raise NotImplementedError

    @classmethod
    def from_river(cls, model, dim: int) -> RiverMirror:
        """The state of ``model`` (which ``supports`` accepts) over features 0..dim-1."""
        raise NotImplementedError

    def to_river(self):
        """The river model in this state: learning on with river gives what the mirror gives."""
        raise NotImplementedError

    def learn_one(self, x: np.ndarray, label: str) -> None:
        """river's ``learn_one(x, label)``; x float64 over features 0..dim-1."""
        raise NotImplementedError

    @classmethod
    def matches_river(cls) -> bool:
        """Whether this mirror learns exactly as the installed river does (checked once)."""
        if cls not in _AGREES_WITH_RIVER:
            _AGREES_WITH_RIVER[cls] = cls._self_check()
        return _AGREES_WITH_RIVER[cls]

    @classmethod
    def _self_check(cls) -> bool:
        """A short stream (``_probe_stream``) learned by river and by the mirror."""
        xs, labels = _probe_stream()
        river_model = cls._probe_model()
        mirror = cls.from_river(river_model, xs.shape[1])
        for x, label in zip(xs, labels):
            river_model.learn_one(dict(enumerate(x.tolist())), label)
            mirror.learn_one(x, label)
        cls._probe_more(river_model, mirror, xs)
        return cls.from_river(river_model, xs.shape[1]).same_state(mirror)

    @staticmethod
    def _probe_model():
        """A fresh river model of the configuration the mirror reproduces."""
        raise NotImplementedError

    @staticmethod
    def _probe_more(river_model, mirror: RiverMirror, xs: np.ndarray) -> None:
        """Steps of the self-check that only this kind of model has."""

    def same_state(self, other: RiverMirror) -> bool:
        """Classes, weights, intercepts and step counts equal, to the bit."""
        return (
            self.classes == other.classes
            and self.weights_t.tobytes() == other.weights_t.tobytes()
            and self.intercepts.tobytes() == other.intercepts.tobytes()
            and self.steps == other.steps
        )

    def add_class(self, label: str, intercept: float = 0.0) -> int:
        """A fresh model for ``label``, all weights 0; its column."""
        col = len(self.classes)
        self.classes.append(label)
        self.index[label] = col
        self.weights_t = np.concatenate([self.weights_t, np.zeros((self.dim, 1))], axis=1)
        self.intercepts = np.append(self.intercepts, intercept)
        self.steps.append(0)
        return col

    def _fill(self, col: int, weights: dict) -> None:
        """Column ``col`` from river's {feature index: weight} dict (absent features: 0)."""
        keys = np.fromiter(weights.keys(), np.int64, len(weights))
        self.weights_t[keys, col] = np.fromiter(weights.values(), np.float64, len(weights))

    def _scratch_like(self, w: np.ndarray) -> np.ndarray:
        """A reused buffer of w's shape: fresh temporaries of this size cost a page-faulting
        allocation each."""
        if self._scratch is None or self._scratch.shape != w.shape:
            self._scratch = np.empty(w.shape)
        return self._scratch

    def _dots(self, w: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Each column of w dotted with x, the products added top to bottom as river's dot
        adds them left to right. numpy reduces over the outer axis one row at a time, but a
        single column is a 1-d sum, which it adds pairwise: that one runs as a cumulative sum."""
        products = np.multiply(w, x[:, None], out=self._scratch_like(w))
        if products.shape[1] > 1:
            return np.add.reduce(products, axis=0)
        return np.add.accumulate(products, axis=0)[-1]

    def _sgd_step(self, w: np.ndarray, x: np.ndarray, g: np.ndarray) -> None:
        """river's SGD step for every column of w: w_i -= lr * (x_i * g)."""
        update = np.multiply(x[:, None], g, out=self._scratch_like(w))
        update *= self.lr
        w -= update

    def weights(self) -> np.ndarray:
        """(classes, features) float64, C-contiguous: what river's weight dicts hold."""
        return np.ascontiguousarray(self.weights_t.T)


_AGREES_WITH_RIVER: dict[type[RiverMirror], bool] = {}  # each mirror's self-check, once per process
#: Whether this Python's ``sum()`` of floats compensates (3.12 on): ten 0.1s then sum to 1.0 exactly.
SUM_COMPENSATES = sum([0.1] * 10) == 1.0


class OvRLogRegMirror(RiverMirror):
    """The learning state of ``OneVsRestClassifier(LogisticRegression(SGD(lr)))``: one
    binary model per class, each with its intercept."""

    def __init__(self, model: OneVsRestClassifier, dim: int):
        """A fresh state for ``model``'s settings (its classes are not read: see ``from_river``)."""
        super().__init__(dim)
        template = cast("LogisticRegression", model.classifier)  # the prototype binary model
        self.template = template
        self.lr = float(template.optimizer.lr.learning_rate)
        self.intercept_lr = float(template.intercept_lr.learning_rate)
        self.intercept_init = float(template.intercept_init)
        self.weight_pos = float(template.loss.weight_pos)
        self.weight_neg = float(template.loss.weight_neg)
        self.clip = template.clip_gradient

    # -- river <-> mirror ---------------------------------------------------------------
    @staticmethod
    def supports(model: Classifier) -> TypeGuard[OneVsRestClassifier]:
        from river import linear_model, multiclass, optim

        if type(model) is not multiclass.OneVsRestClassifier:
            return False
        clf = model.classifier
        return (
            type(clf) is linear_model.LogisticRegression
            and type(clf.optimizer) is optim.SGD
            and type(clf.optimizer.lr) is optim.schedulers.Constant
            and type(clf.intercept_lr) is optim.schedulers.Constant
            and type(clf.loss) is optim.losses.Log
            and type(clf.initializer) is optim.initializers.Zeros
            and clf.l1 == 0
            and clf.l2 == 0
            and all(type(c) is linear_model.LogisticRegression for c in model.classifiers.values())
        )

    @classmethod
    def from_river(cls, model: OneVsRestClassifier, dim: int) -> OvRLogRegMirror:
        mirror = cls(model, dim)
        for label, binary in model.classifiers.items():
            clf = cast("LogisticRegression", binary)
            col = mirror.add_class(str(label), clf.intercept)
            mirror._fill(col, clf.weights)
            mirror.steps[col] = clf.optimizer.n_iterations
        return mirror

    def to_river(self) -> OneVsRestClassifier:
        from river import multiclass
        from river.utils import VectorDict

        model = multiclass.OneVsRestClassifier(self.template.clone())
        for col, label in enumerate(self.classes):
            clf = self.template.clone()
            # river has no setter for the weights. Keys go in feature order: the order river
            # inserts them when it learns a dense dict.
            clf._weights = VectorDict(dict(enumerate(self.weights_t[:, col].tolist())))
            clf.intercept = float(self.intercepts[col])
            clf.optimizer.n_iterations = self.steps[col]
            model.classifiers[label] = clf
        return model

    # -- learning -----------------------------------------------------------------------
    def add_class(self, label: str, intercept: float | None = None) -> int:
        """A fresh binary model for ``label`` (river's clone of the prototype); its column."""
        return super().add_class(label, self.intercept_init if intercept is None else intercept)

    def learn_one(self, x: np.ndarray, label: str) -> None:
        """``OneVsRestClassifier.learn_one``: every class's model learns (x, y == its class)."""
        if label not in self.index:
            self.add_class(label)
        cols = slice(None)
        targets = [c == label for c in self.classes]
        self._step(cols, x, targets)

    def learn_negatives(self, label: str, xs: np.ndarray) -> None:
        """``label``'s binary model alone learns each row of ``xs`` as a negative, in order."""
        col = self.index[label]
        for x in xs:
            self._step(slice(col, col + 1), x.astype(np.float64), [False])

    def _step(self, cols: slice, x: np.ndarray, targets: Sequence[bool]) -> None:
        w = self.weights_t[:, cols]
        z = self._dots(w, x) + self.intercepts[cols]
        grads = [self._loss_gradient(zc, y) for zc, y in zip(z.tolist(), targets)]
        g = np.array(grads)
        self.intercepts[cols] -= self.intercept_lr * g
        self._sgd_step(w, x, g)
        start = cols.start or 0
        for col in range(start, start + len(grads)):
            self.steps[col] += 1

    def _loss_gradient(self, z: float, y: bool) -> float:
        """river's ``optim.losses.Log.gradient`` for one item, then GLM's clamp."""
        if y:
            sign, weight = 1, self.weight_pos
        else:
            sign, weight = -1, self.weight_neg
        z = z * sign
        if z > 18.0:
            grad = weight * math.exp(-z) * -sign
        elif z < -18.0:
            grad = weight * -sign
        else:
            grad = weight * -sign / (math.exp(z) + 1.0)
        return float(min(max(grad, -self.clip), self.clip))

    @staticmethod
    def _probe_model() -> OneVsRestClassifier:
        from river import linear_model, multiclass, optim

        return multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(0.05)))

    @staticmethod
    def _probe_more(river_model, mirror: RiverMirror, xs: np.ndarray) -> None:
        """Negatives for one class alone (river_ovr_balanced's replay)."""
        assert isinstance(mirror, OvRLogRegMirror)
        mirror.learn_negatives("c", xs[:5])
        for x in xs[:5]:
            river_model.classifiers["c"].learn_one(dict(enumerate(x.tolist())), False)


class SoftmaxMirror(RiverMirror):
    """The learning state of ``SoftmaxRegression(SGD(lr))``: one weight vector per class,
    no intercept, each class with its own copy of the optimiser."""

    def __init__(self, model: SoftmaxRegression, dim: int):
        """A fresh state for ``model``'s settings (its classes are not read: see ``from_river``)."""
        super().__init__(dim)
        self.template = model
        self.lr = float(cast("Constant", model.optimizer.lr).learning_rate)
        self._neumaier: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @staticmethod
    def supports(model: Classifier) -> TypeGuard[SoftmaxRegression]:
        from river import linear_model, optim

        if type(model) is not linear_model.SoftmaxRegression:
            return False
        optimisers = [model.optimizer, *model.optimizers.values()]
        return (
            all(type(o) is optim.SGD and type(o.lr) is optim.schedulers.Constant for o in optimisers)
            and len({o.lr.learning_rate for o in optimisers}) == 1
            and type(model.loss) is optim.losses.CrossEntropy
            and not model.loss.class_weight
            and model.l2 == 0
        )

    @classmethod
    def from_river(cls, model: SoftmaxRegression, dim: int) -> SoftmaxMirror:
        mirror = cls(model, dim)
        for label, weights in model.weights.items():
            col = mirror.add_class(str(label))
            mirror._fill(col, weights)
            mirror.steps[col] = model.optimizers[label].n_iterations
        return mirror

    def to_river(self) -> SoftmaxRegression:
        model = self.template.clone()
        for col, label in enumerate(self.classes):
            # Keys in feature order: the order river inserts them when it learns a dense dict.
            model.weights[label] = collections.defaultdict(float, enumerate(self.weights_t[:, col].tolist()))
            model.optimizers[label].n_iterations = self.steps[col]
        return model

    def learn_one(self, x: np.ndarray, label: str) -> None:
        """``SoftmaxRegression.learn_one``: river's softmax over the classes met so far, then
        every class (and ``label``, if new) steps on its gradient ``p - (label == class)``."""
        dots = self._compensated_dots if SUM_COMPENSATES else self._dots  # river's dot is a sum()
        proba = _softmax(dots(self.weights_t, x).tolist()) if self.classes else []
        if label not in self.index:
            self.add_class(label)
            proba.append(0.0)  # a class not met yet has no score: river's y_pred.get(label, 0.0)
        # river's CrossEntropy gradient, with its clamp_proba. (l2 = 0 adds 0 * w, a zero
        # that changes no weight: a weight that starts at +0.0 never becomes -0.0.)
        g = np.array([max(min(p, 1 - 1e-15), 1e-15) - (c == label) for p, c in zip(proba, self.classes)])
        self._sgd_step(self.weights_t, x, g)
        self.steps = [n + 1 for n in self.steps]

    def _compensated_dots(self, w: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Each column of w dotted with x as Python 3.12+'s ``sum()`` adds the products:
        ``0 + x_1``, then the running sum ``f`` and a compensation ``c`` that collects each
        addition's rounding error, exact by Fast2Sum on the larger magnitude first (Neumaier);
        ``f + c`` at the end when ``c`` is a non-zero finite number. The running sums are a
        cumulative sum, every error is computed at once (in reused buffers), and the errors
        are added top to bottom as ``c`` collects them."""
        if len(w) < 2:
            return np.multiply(w, x[:, None]).sum(axis=0) + 0.0  # one product: 0 + x_1
        products = np.multiply(w, x[:, None], out=self._scratch_like(w))
        products[0] += 0.0  # sum() starts from the int 0: -0.0 becomes 0.0
        running, err, other, larger = self._neumaier_buffers(w.shape)
        np.add.accumulate(products, axis=0, out=running)
        before, term, after = running[:-1], products[1:], running[1:]
        with np.errstate(invalid="ignore"):  # inf - inf: a NaN error, as in sum()
            np.greater_equal(np.abs(before, out=err), np.abs(term, out=other), out=larger)
            np.subtract(before, after, out=err)
            err += term  # (f - t) + x, where |f| >= |x|
            np.subtract(term, after, out=other)
            other += before  # (x - t) + f, elsewhere
        np.copyto(err, other, where=~larger)
        comp = np.add.reduce(err, axis=0) if err.shape[1] > 1 else np.add.accumulate(err, axis=0)[-1]
        total = running[-1]
        return np.where((comp != 0) & np.isfinite(comp), total + comp, total)

    def _neumaier_buffers(self, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Reused (features, classes) and (features - 1, classes) buffers for ``_compensated_dots``."""
        bufs = self._neumaier
        if bufs is None or bufs[0].shape != shape:
            rest = (shape[0] - 1, shape[1])
            bufs = self._neumaier = (np.empty(shape), np.empty(rest), np.empty(rest), np.empty(rest, bool))
        return bufs

    @staticmethod
    def _probe_model() -> SoftmaxRegression:
        from river import linear_model, optim

        return linear_model.SoftmaxRegression(optimizer=optim.SGD(0.05))


def _softmax(z: list[float]) -> list[float]:
    """river's ``utils.math.softmax`` over one item's scores, in the same order of operations."""
    maximum = max(z)
    exps = [math.exp(v - maximum) for v in z]
    total = 0.0
    for e in exps:
        total += e
    return [e / total for e in exps]


def _probe_stream() -> tuple[np.ndarray, list[str]]:
    """60 rows at the encoder's width (numpy picks its loop order by shape), of two scales
    (so the losses saturate too), one all zeros; labels cycle over 6 classes, then over 12
    (so sums over classes run past numpy's 8-way pairwise blocks)."""
    rng = np.random.default_rng(20261127)
    xs = rng.standard_normal((60, 384)) * rng.choice([0.05, 3.0], size=(60, 1))
    xs[7] = 0.0
    names = "abcdefghijkl"
    return xs, [names[i % 6] for i in range(20)] + [names[i % 12] for i in range(40)]
