"""The OCRR held-out-class protocol (paper section 3.2), seed-for-seed with the authors' harness.

1. Held-out classes: ``default_rng(seed).choice(len(labels), size=H, replace=False)``
   over the sorted label list.
2. Seed set: training items of the other classes; eval "original": test items of the
   known classes; eval "novel": test items of the held-out classes. File order kept.
3. A fresh ``default_rng(seed)`` caps each eval set (original first, then novel) with
   ``choice(n, size=cap, replace=False)`` when it is larger, then orders the stream (the
   held-out classes' training items) by ``permutation(n)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ocrr.data.records import Dataset
from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.scenario import Scenario, cap_and_shuffle, every_n, split_rows
from ocrr.protocols.summary import (
    CELL_KEYS,
    FOOTPRINT_BYTES,
    FOOTPRINT_ENTRIES,
    FOOTPRINT_PARAMS,
    RUN_KEYS,
    add_online_accuracy,
    corrections_to,
    fmt_acc,
    fmt_buffer,
    fmt_corrections,
    summarise_runs,
)

THRESHOLDS = (10, 50, 70)  # corrections until novel accuracy first reaches N %


class HeldoutProtocol(Protocol):
    """The paper's protocol: a seed set of known classes, a stream of H held-out classes'
    items (one-item episodes), novel and original accuracy every ``every`` items.

    The storage split of the paper's section 4.4 (the seed corpus goes through the same
    eviction as corrections) is a property of the bounded systems, not of this protocol:
    a bounded substrate's budget already covers its seed entries.
    """

    name = "heldout"
    summary_text = "held-out classes (OCRR paper 3.2): recover novel classes, keep the original ones"
    options = {
        "n_heldout": Option(10, int, low=1, help="classes held out of the seed set"),
        "eval_cap": Option(400, int, low=0, help="cap on each eval set; 0 for none"),
        "every": Option(50, int, low=1, help="checkpoint every N stream items"),
    }
    metrics = ("acc_novel", "acc_original")

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        v = self.values
        return heldout_scenario(dataset, train_vecs, test_vecs, seed, v["n_heldout"], v["eval_cap"] or None, v["every"])

    def summarise(self, per_checkpoint, footprints=None):
        return add_online_accuracy(summarise(per_checkpoint, footprints), per_checkpoint)

    def summary_columns(self):
        return SUMMARY_COLUMNS

    def table(self, summary):
        return TABLE_HEADER, table_rows(summary), TABLE_NOTE

    def per_run(self, per_checkpoint):
        return per_run(per_checkpoint)


def heldout_scenario(
    dataset: Dataset,
    train_vecs: np.ndarray,
    test_vecs: np.ndarray,
    seed: int,
    n_heldout: int = 10,
    eval_cap: int | None = 400,
    every: int = 50,
) -> Scenario:
    labels = dataset.labels
    if not 0 < n_heldout < len(labels):
        raise OcrrError(
            f"--heldout {n_heldout} is impossible for {dataset.name} with {len(labels)} classes; "
            f"choose between 1 and {len(labels) - 1}."
        )
    held_idx = np.random.default_rng(seed).choice(len(labels), size=n_heldout, replace=False)
    heldout = {labels[i] for i in held_idx}

    train_labels = np.array(dataset.train.labels, dtype=object)
    test_labels = np.array(dataset.test.labels, dtype=object)
    train_is_novel = np.isin(train_labels, list(heldout))
    test_is_novel = np.isin(test_labels, list(heldout))
    seed_idx = np.flatnonzero(~train_is_novel)
    stream_idx = np.flatnonzero(train_is_novel)
    original_idx = np.flatnonzero(~test_is_novel)
    novel_idx = np.flatnonzero(test_is_novel)

    eval_idx, stream_idx = cap_and_shuffle(seed, eval_cap, {"original": original_idx, "novel": novel_idx}, stream_idx)
    return Scenario(
        protocol="heldout",
        seed_value=seed,
        labels=labels,
        eval_after=every_n(len(stream_idx), every),
        **split_rows(dataset, train_vecs, test_vecs, seed_idx, stream_idx, eval_idx),
        heldout=tuple(labels[i] for i in held_idx),
        info={"n_heldout": n_heldout, "eval_cap": eval_cap, "every": every},
    )


# --- results: the paper's Table 1 numbers ---------------------------------------------------------


def per_run(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """One row per run: final accuracies and corrections to each threshold."""
    rows = []
    for key, run in per_checkpoint.groupby(RUN_KEYS, sort=True):
        last = run.loc[run["step"].idxmax()]
        row = dict(zip(RUN_KEYS, key))
        row.update(
            final_novel=float(last["acc_novel"]),
            final_original=float(last["acc_original"]),
            corrections=int(last["corrections"]),
            steps=int(last["step"]),
        )
        for t in THRESHOLDS:
            row[f"corrections_to_{t}"] = corrections_to(run, t, "acc_novel")
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, encoder, policy, system): mean and std over seeds (footprints: mean, rounded)."""
    return summarise_runs(per_run(per_checkpoint), ("final_novel", "final_original"), THRESHOLDS, footprints)


# summary.csv's columns, in the order its files have always had (footprints: entries, bytes, params)
SUMMARY_COLUMNS = (
    CELL_KEYS
    + ["n_seeds", "final_novel_mean", "final_novel_std", "final_original_mean", "final_original_std"]
    + [f"corrections_to_{t}_{s}" for t in THRESHOLDS for s in ("mean", "reached")]
    + [FOOTPRINT_ENTRIES, FOOTPRINT_BYTES, FOOTPRINT_PARAMS, "corrections_mean"]
)
TABLE_HEADER = ["system", "buffer", "final novel", "final original"] + [f"→{t}%" for t in THRESHOLDS]
TABLE_NOTE = (
    "Final accuracies are mean ± std (population) over seeds at the end of the stream. "
    "→N%: corrections applied when novel accuracy first reached N % (checkpoints every 50 items), "
    "mean over the seeds that reached it; '(r/n)' when only r of n seeds did."
)


def table_rows(summary: pd.DataFrame) -> list[list[str]]:
    """The paper's Table 1 columns: system, buffer, final novel/original, corrections to 10/50/70 %."""
    rows = []
    for _, r in summary.iterrows():
        n = int(r["n_seeds"])
        rows.append(
            [
                r["system"],
                fmt_buffer(r),
                fmt_acc(r["final_novel_mean"], r["final_novel_std"], n),
                fmt_acc(r["final_original_mean"], r["final_original_std"], n),
            ]
            + [
                fmt_corrections(r[f"corrections_to_{t}_mean"], int(r[f"corrections_to_{t}_reached"]), n)
                for t in THRESHOLDS
            ]
        )
    return rows
