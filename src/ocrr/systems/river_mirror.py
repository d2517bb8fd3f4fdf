"""river's one-vs-rest logistic regression under SGD, learned in numpy bit for bit.

river learns one dict at a time: a correction to a 77-class one-vs-rest model runs 77
binary ``learn_one`` calls of about 40 µs each, and reading the weights back for
prediction costs as much again. That made river_logreg half of a sweep's CPU.

The arithmetic of one binary step is small and fixed (river 0.26,
``linear_model.base.GLM._fit`` with ``optim.SGD`` and ``optim.losses.Log``)::

    z  = sum_i w_i * x_i  (left to right, over the features in order) + b
    g  = loss gradient of (y, z)        # math.exp, as river calls it
    b -= intercept_lr * g
    w_i -= lr * (x_i * g)

``OvRLogRegMirror`` runs it for every class at once. Weights are stored features x
classes, so numpy's reduction over the features adds the products left to right, as
river's loop does; the elementwise steps round exactly as river's. The loss
gradient keeps Python's ``math.exp`` (numpy's vectorised exp can differ in the last
bit). ``mirror_matches_river`` checks all of this against river itself once per process;
a river whose arithmetic differs (another version) is used directly instead.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeGuard, cast

import numpy as np

if TYPE_CHECKING:
    from river.base import Classifier
    from river.linear_model import LogisticRegression
    from river.multiclass import OneVsRestClassifier


class OvRLogRegMirror:
    """The learning state of ``OneVsRestClassifier(LogisticRegression(SGD(lr)))``.

    ``classes`` are in river's order (first met first); ``weights_t`` is (features,
    classes) float64; ``intercepts`` and ``steps`` (each binary model's optimiser step
    count) are per class.
    """

    def __init__(self, model: OneVsRestClassifier, dim: int):
        """A fresh state for ``model``'s settings (its classes are not read: see ``from_river``)."""
        template = cast("LogisticRegression", model.classifier)  # the prototype binary model
        self.template = template
        self.dim = dim
        self.lr = float(template.optimizer.lr.learning_rate)
        self.intercept_lr = float(template.intercept_lr.learning_rate)
        self.intercept_init = float(template.intercept_init)
        self.weight_pos = float(template.loss.weight_pos)
        self.weight_neg = float(template.loss.weight_neg)
        self.clip = template.clip_gradient
        self.classes: list[str] = []
        self.index: dict[str, int] = {}
        self.weights_t = np.zeros((dim, 0))
        self.intercepts = np.zeros(0)
        self.steps: list[int] = []
        self._scratch: np.ndarray | None = None

    # -- river <-> mirror ---------------------------------------------------------------
    @staticmethod
    def supports(model: Classifier) -> TypeGuard[OneVsRestClassifier]:
        """Whether ``model`` is the configuration this mirror reproduces."""
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
        """The state of ``model`` (which ``supports`` accepts) over features 0..dim-1."""
        mirror = cls(model, dim)
        for label, binary in model.classifiers.items():
            clf = cast("LogisticRegression", binary)
            col = mirror.add_class(str(label))
            weights = clf.weights
            keys = np.fromiter(weights.keys(), np.int64, len(weights))
            mirror.weights_t[keys, col] = np.fromiter(weights.values(), np.float64, len(weights))
            mirror.intercepts[col] = clf.intercept
            mirror.steps[col] = clf.optimizer.n_iterations
        return mirror

    def to_river(self) -> OneVsRestClassifier:
        """The river model in this state: learning on with river gives what the mirror gives."""
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
    def add_class(self, label: str) -> int:
        """A fresh binary model for ``label`` (river's clone of the prototype); its column."""
        col = len(self.classes)
        self.classes.append(label)
        self.index[label] = col
        self.weights_t = np.concatenate([self.weights_t, np.zeros((self.dim, 1))], axis=1)
        self.intercepts = np.append(self.intercepts, self.intercept_init)
        self.steps.append(0)
        return col

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
            self._step(slice(col, col + 1), x, [False])

    def _step(self, cols: slice, x: np.ndarray, targets: Sequence[bool]) -> None:
        w = self.weights_t[:, cols]
        scratch = self._scratch_like(w)
        products = np.multiply(w, x[:, None], out=scratch)
        # river's dot adds the products left to right. numpy reduces over the outer axis one
        # row at a time, but a single column is a 1-d sum, which it adds pairwise: that one
        # runs as a cumulative sum.
        if products.shape[1] > 1:
            dots = np.add.reduce(products, axis=0)
        else:
            dots = np.add.accumulate(products, axis=0)[-1]
        z = dots + self.intercepts[cols]
        grads = [self._loss_gradient(zc, y) for zc, y in zip(z.tolist(), targets)]
        g = np.array(grads)
        self.intercepts[cols] -= self.intercept_lr * g
        update = np.multiply(x[:, None], g, out=scratch)  # river's gradient: x_i * g
        update *= self.lr
        w -= update
        start = cols.start or 0
        for col in range(start, start + len(grads)):
            self.steps[col] += 1

    def _scratch_like(self, w: np.ndarray) -> np.ndarray:
        """A reused buffer of w's shape: fresh temporaries of this size cost a page-faulting
        allocation each."""
        if self._scratch is None or self._scratch.shape != w.shape:
            self._scratch = np.empty(w.shape)
        return self._scratch

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

    # -- reading ------------------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """(classes, features) float64, C-contiguous: what river's weight dicts hold."""
        return np.ascontiguousarray(self.weights_t.T)


@functools.cache
def mirror_matches_river() -> bool:
    """Whether the mirror learns exactly as the installed river does (checked once).

    A short random stream with three classes, one of them first met mid-stream and one
    item with zero features, learned by both; weights, intercepts and step counts must be
    equal to the bit.
    """
    from river import linear_model, multiclass, optim

    rng = np.random.default_rng(20261127)
    dim = 384  # the encoder's width: numpy picks its loop order by shape
    xs = rng.standard_normal((40, dim)) * rng.choice([0.05, 3.0], size=(40, 1))
    xs[7] = 0.0
    labels = ["a", "b"] * 10 + ["a", "b", "c"] * 6 + ["c", "a"]
    river_model = multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(0.05)))
    mirror = OvRLogRegMirror(river_model, dim)
    for x, label in zip(xs, labels):
        river_model.learn_one(dict(enumerate(x.tolist())), label)
        mirror.learn_one(x, label)
    mirror.learn_negatives("c", xs[:5])
    for x in xs[:5]:
        river_model.classifiers["c"].learn_one(dict(enumerate(x.tolist())), False)
    theirs = OvRLogRegMirror.from_river(river_model, dim)
    return (
        theirs.classes == mirror.classes
        and theirs.weights_t.tobytes() == mirror.weights_t.tobytes()
        and theirs.intercepts.tobytes() == mirror.intercepts.tobytes()
        and theirs.steps == mirror.steps
    )
