"""One correction to river's linear models: river itself against ocrr's numpy mirror of it.

river_logreg (and river_ovr_balanced) learn with ``OneVsRestClassifier(LogisticRegression(
SGD(0.01)))``: each correction is one binary ``learn_one`` per class. river_softmax learns
with ``SoftmaxRegression(SGD(0.01))``, in pure Python dicts. ``ocrr.systems.river.mirror``
runs the same step for every class at once in numpy. For each model and class count this
prints, per correction, river's ``learn_one`` and the mirror's, then reading the weights
for prediction (river's dicts into a matrix, or the mirror's copy), and, as the limit, the
bare float64 arithmetic of one step in the same run (a products matrix, its sum down the
features and the rank-one update; the mirror adds what is per class in Python floats,
since numpy's exp can round differently from river's math.exp). The last column says
whether the two ended in the same state, to the bit (weights, intercepts, step counts).
On Python 3.12+ the softmax mirror adds its dot products as ``sum()`` does there (with
compensation), and the header says so.

Synthetic rows (384 float32 features, unit length, as the encoder's); every class is met
in the seed part, so no column is added while timing.
Run: python benchmarks/bench_river.py [--classes 77 150] [--corrections 300]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from river import linear_model, multiclass, optim

from ocrr.systems.river.classifiers import RiverLogReg, RiverSoftmax, as_features
from ocrr.systems.river.mirror import SUM_COMPENSATES, OvRLogRegMirror, SoftmaxMirror

DIM = 384


def rows(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def per_call(fn, items) -> float:
    """Seconds per call of fn over items, one pass."""
    t = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - t) / len(items)


def bare_step(weights_t: np.ndarray, x: np.ndarray, scratch: np.ndarray, g: np.ndarray) -> None:
    """The float64 work of one step for every class, given its loss gradients g: products,
    their sum down the features, the rank-one update (no Python per class)."""
    np.multiply(weights_t, x[:, None], out=scratch)
    np.add.reduce(scratch, axis=0)
    np.multiply(x[:, None], g, out=scratch)
    scratch *= 0.01
    weights_t -= scratch


MODELS = {
    "one-vs-rest": (
        lambda: multiclass.OneVsRestClassifier(linear_model.LogisticRegression(optimizer=optim.SGD(0.01))),
        OvRLogRegMirror,
        RiverLogReg,
    ),
    "softmax": (lambda: linear_model.SoftmaxRegression(optimizer=optim.SGD(0.01)), SoftmaxMirror, RiverSoftmax),
}


def measure(kind: str, n_classes: int, corrections: int) -> list[str]:
    """One table row: the figures for this model and this many classes."""
    make_model, mirror_class, system_class = MODELS[kind]
    seed_x = rows(3 * n_classes, seed=n_classes)
    seed_y = [f"c{i % n_classes}" for i in range(len(seed_x))]
    stream_x = rows(corrections, seed=n_classes + 1)
    stream_y = [f"c{i}" for i in np.random.default_rng(n_classes).integers(0, n_classes, corrections)]

    model = make_model()
    for x, y in zip(seed_x, seed_y):
        model.learn_one(as_features(x), y)
    mirror = mirror_class.from_river(model, DIM)
    items = list(zip(stream_x, stream_y))

    river_s = per_call(lambda item: model.learn_one(as_features(item[0]), item[1]), items)
    mirror_s = per_call(lambda item: mirror.learn_one(item[0].astype(np.float64), item[1]), items)

    reader = system_class()
    reader.dim_, reader._model = DIM, model
    read_river = per_call(lambda _: reader._read_weights(), range(20))
    read_mirror = per_call(lambda _: mirror.weights(), range(20))
    weights_t, scratch = mirror.weights_t.copy(), np.empty_like(mirror.weights_t)
    g = np.full(n_classes, 1e-6)
    bare = per_call(lambda x: bare_step(weights_t, x.astype(np.float64), scratch, g), stream_x)

    same = mirror_class.from_river(model, DIM).same_state(mirror)
    return [
        kind,
        f"{n_classes}",
        f"{river_s * 1e3:.2f} ms",
        f"{mirror_s * 1e6:.0f} µs",
        f"{river_s / mirror_s:.0f}x",
        f"{read_river * 1e3:.2f} ms",
        f"{read_mirror * 1e6:.0f} µs",
        f"{bare * 1e6:.0f} µs",
        "yes" if same else "NO",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", type=int, nargs="+", default=[77, 150], help="class counts (default 77 150)")
    ap.add_argument("--corrections", type=int, default=300, help="timed corrections per class count (default 300)")
    args = ap.parse_args()
    if min(args.classes) < 1 or args.corrections < 1:
        ap.error("--classes and --corrections must be at least 1")

    dots = "compensated, as sum() adds them" if SUM_COMPENSATES else "added left to right"
    print(f"per correction, 384 features, SGD(0.01); Python {sys.version.split()[0]}: softmax dot products {dots}")
    header = [
        "model",
        "classes",
        "river learn_one",
        "mirror",
        "speed-up",
        "read river",
        "read mirror",
        "bare step",
        "same state",
    ]
    table = [header] + [measure(kind, n, args.corrections) for kind in MODELS for n in args.classes]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths)))


if __name__ == "__main__":
    main()
