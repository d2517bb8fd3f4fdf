"""Online continual learning as EvalOCL measures it (Hammoud et al., ICCV 2023), on text.

The system starts from an optional upstream (``upstream``: a seeded fraction of the training
items; default none, the encoder alone) and sees every other training item once, in a
stream of batches of ``batch`` items; it predicts a batch with the state after the previous
one, then learns from it (under the policy ``all`` every label is revealed; the other
policies still apply). Label correlation: the stream's labels follow a Markov chain
(``label_chain_order``): with probability ``stay`` the next item has the current item's
label, otherwise a label drawn in proportion to the items each label has left, so every
item is used once; ``stay=0`` is a shuffled stream, ``stay`` near 1 long runs of one intent.
The test items are ordered by the same chain (their own draw), for retention.

Metrics: ``online_accuracy`` (the runner's), ``near_future_accuracy`` with the common option
``shift=S`` (S from ``ocrr calibrate-shift``), ``acc_test``: accuracy on the time-ordered
test stream at every checkpoint; after the last, its final value is the retention (backward
transfer at T), and ``acc_past_<q>`` the final state's accuracy on the first q % of the test
stream (the retention curve over time, in ``windows`` prefix windows).

``split=val`` draws the streams of another family (calibration, hyperparameter choice); the
stream of a run depends on (dataset, split, stay, seed), never on the system.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.scenario import Scenario, crc, every_n, rows_of
from ocrr.protocols.summary import RUN_KEYS, add_run_stat, fmt_acc, last_checkpoints

PAST = "acc_past_"  # acc_past_<q>: the final state's accuracy on the first q % of the test stream


def label_chain_order(labels: Sequence[str], stay: float, rng: np.random.Generator) -> np.ndarray:
    """An order of the items whose labels follow the chain: keep the current label with
    probability ``stay`` (while it has items left), else draw a label in proportion to its
    items left (possibly the same one). Within a label, items come in a random order."""
    classes, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    pools = [rng.permutation(np.flatnonzero(codes == c)) for c in range(len(classes))]
    left = np.array([len(p) for p in pools], np.int64)
    taken = np.zeros(len(classes), np.int64)
    n = len(codes)
    keep, draw = rng.random(n), rng.random(n)
    order = np.empty(n, np.int64)
    current = -1
    for t in range(n):
        if current < 0 or left[current] == 0 or keep[t] >= stay:
            cum = np.cumsum(left)
            current = int(np.searchsorted(cum, draw[t] * cum[-1], side="right"))
        order[t] = pools[current][taken[current]]
        taken[current] += 1
        left[current] -= 1
    return order


def prefix_accuracy(correct: Sequence[bool]) -> np.ndarray:
    """Accuracy on the first 1, 2, ..., n items (the retention curve of a time-ordered set)."""
    c = np.asarray(correct, float)
    return np.cumsum(c) / np.arange(1, len(c) + 1)


def window_ends(n: int, windows: int) -> list[tuple[int, int]]:
    """(percent, end) of each prefix window: the first q % of n items, q = 100 w / windows."""
    return [(round(100 * w / windows), int(np.ceil(n * w / windows))) for w in range(1, windows + 1)]


class OclProtocol(Protocol):
    """EvalOCL's setting: every training item once, in batches, label-correlated order."""

    name = "ocl"
    summary_text = (
        "online continual learning (EvalOCL): every training item once, label-ordered stream, "
        "online vs near-future accuracy, retention"
    )
    options = {
        "batch": Option(1, int, low=1, help="items per incoming batch (the paper: 64 or 128)"),
        "stay": Option(0.0, float, low=0.0, high=1.0, help="probability that the next label repeats; 0: shuffled"),
        "upstream": Option(0.0, float, low=0.0, high=0.9, help="fraction of training items fitted before the stream"),
        "split": Option("test", str, choices=("test", "val"), help="test or val: which family of streams"),
        "checkpoints": Option(20, int, low=1, help="evaluations along the stream (besides the start)"),
        "windows": Option(10, int, low=1, high=100, help="prefix windows of the retention curve"),
    }
    metrics = ("acc_test",)

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        return ocl_scenario(dataset, train_vecs, test_vecs, seed, self.values)

    def streams(self, dataset, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(upstream, stream, test stream) item indices of a run: what calibration reads."""
        return ocl_streams(dataset, seed, self.values)

    # -- results ------------------------------------------------------------------------------

    def summarise(self, per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
        return add_near_future(super().summarise(per_checkpoint, footprints), per_checkpoint)

    def table(self, summary):
        return ocl_table(summary, self.shift)

    def per_run(self, per_checkpoint):
        return ocl_per_run(per_checkpoint)


def ocl_streams(dataset, seed: int, values: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = values
    key = [crc("ocl"), crc(dataset.name), crc(v["split"]), int(seed)]
    train_labels, test_labels = list(dataset.train.labels), list(dataset.test.labels)
    n_up = int(round(v["upstream"] * len(train_labels)))
    up_rng = np.random.default_rng(np.random.SeedSequence([*key, crc("upstream")]))
    upstream = np.sort(up_rng.choice(len(train_labels), size=n_up, replace=False)) if n_up else np.arange(0)
    rest = np.setdiff1d(np.arange(len(train_labels)), upstream)
    stay = float(v["stay"])
    order = label_chain_order(
        [train_labels[i] for i in rest], stay, np.random.default_rng(np.random.SeedSequence([*key, crc("stream")]))
    )
    test_order = label_chain_order(
        test_labels, stay, np.random.default_rng(np.random.SeedSequence([*key, crc("test")]))
    )
    return upstream, rest[order], test_order


def ocl_scenario(dataset, train_vecs: np.ndarray, test_vecs: np.ndarray, seed: int, values: dict) -> Scenario:
    v = values
    upstream, stream_idx, test_idx = ocl_streams(dataset, seed, v)
    n = len(stream_idx)
    if n == 0:
        raise OcrrError(f"protocol ocl: {dataset.name} leaves no training item for the stream; lower ocl:upstream.")
    batch = v["batch"]
    bounds = None if batch == 1 else np.unique(np.concatenate([np.arange(0, n, batch), [n]]))
    n_episodes = n if bounds is None else len(bounds) - 1
    test = rows_of(dataset.test, test_vecs, test_idx)
    ends = window_ends(len(test), v["windows"])

    def retention_curve(so_far) -> dict[str, Batch]:
        """After the last episode: the first q % of the time-ordered test stream, per window."""
        if so_far.step < n:
            return {}
        return {f"past_{q:03d}": test[:end] for q, end in ends}

    return Scenario(
        protocol="ocl",
        seed_value=seed,
        labels=dataset.labels,
        seed_set=rows_of(dataset.train, train_vecs, upstream),
        stream=rows_of(dataset.train, train_vecs, stream_idx),
        eval_sets={"test": test},
        eval_after=every_n(n_episodes, max(1, -(-n_episodes // v["checkpoints"]))),
        episode_bounds=bounds,
        dynamic_eval_sets=retention_curve,
        info={"n_upstream": len(upstream), "n_stream": n, "n_test": len(test), "batch": batch, "stay": v["stay"]},
    )


# --- results: per run and per cell ---------------------------------------------------------------


def add_near_future(summary: pd.DataFrame, per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """``near_future_accuracy_mean`` / ``_std`` over runs (each run's value at its end), and
    the gap online - near-future."""
    if "near_future_accuracy" not in per_checkpoint.columns or not len(summary):
        return summary
    out = add_run_stat(summary, per_checkpoint, "near_future_accuracy")
    if "online_accuracy_mean" in out.columns:
        out["gap_mean"] = out["online_accuracy_mean"] - out["near_future_accuracy_mean"]
    return out


def ocl_per_run(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """One row per run: online and near-future accuracy, retention and its curve (acc_past_q)."""
    last = last_checkpoints(per_checkpoint)
    cols = [c for c in ("online_accuracy", "near_future_accuracy", "acc_test") if c in last.columns]
    curve = sorted(c for c in last.columns if c.startswith(PAST))
    out = last[RUN_KEYS + ["step", "corrections"] + cols + curve].rename(columns={"acc_test": "retention"})
    return out.reset_index(drop=True)


def ocl_table(summary: pd.DataFrame, shift: int | None) -> tuple[list[str], list[list[str]], str]:
    at = f"S={shift}" if shift is not None else "no shift set"
    header = ["system", "online acc", f"near-future acc ({at})", "gap", "retention"]
    rows = []
    for _, r in summary.iterrows():
        n = int(r["n_seeds"])
        nf = r.get("near_future_accuracy_mean", math.nan)
        gap = r.get("gap_mean", math.nan)
        rows.append(
            [
                r["system"],
                fmt_acc(r.get("online_accuracy_mean", math.nan), r.get("online_accuracy_std", 0), n),
                fmt_acc(nf, r.get("near_future_accuracy_std", 0.0), n),
                "–" if not np.isfinite(gap) else f"{gap:+.3f}",
                fmt_acc(r["final_acc_test_mean"], r["final_acc_test_std"], n),
            ]
        )
    note = (
        "Mean ± std (population) over runs (each seed is its own stream). Online acc: every item predicted by "
        "the state after the previous batch. Near-future acc: item t+1+S predicted by the state after item t "
        "(states that learned nothing ask nothing), S in items. Gap: online − near-future. Retention: the "
        "final state's accuracy on the test items, ordered in time by the same chain (backward transfer at T)."
    )
    return header, rows, note
