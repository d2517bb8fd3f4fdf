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

from ocrr.batch import Batch
from ocrr.data.records import Dataset
from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.scenario import Scenario, every_n


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
        from ocrr.engine.metrics import add_online_accuracy, summarise

        return add_online_accuracy(summarise(per_checkpoint, footprints), per_checkpoint)

    def summary_columns(self):
        from ocrr.engine.results import SUMMARY_COLUMNS

        return SUMMARY_COLUMNS

    def table(self, summary):
        from ocrr.engine.results import TABLE_HEADER, TABLE_NOTE, table_rows

        return TABLE_HEADER, table_rows(summary), TABLE_NOTE

    def per_run(self, per_checkpoint):
        from ocrr.engine.metrics import per_run

        return per_run(per_checkpoint)

    def report_cell(self, rows, summary, title, styles):
        from ocrr.report.heldout import heldout_cell

        return heldout_cell(rows, summary, title, styles)


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

    rng = np.random.default_rng(seed)
    if eval_cap is not None:
        if len(original_idx) > eval_cap:
            original_idx = original_idx[rng.choice(len(original_idx), size=eval_cap, replace=False)]
        if len(novel_idx) > eval_cap:
            novel_idx = novel_idx[rng.choice(len(novel_idx), size=eval_cap, replace=False)]
    stream_idx = stream_idx[rng.permutation(len(stream_idx))]

    train, test = dataset.train, dataset.test
    return Scenario(
        protocol="heldout",
        seed_value=seed,
        labels=labels,
        seed_set=_batch(train, train_vecs, seed_idx),
        stream=_batch(train, train_vecs, stream_idx),
        eval_sets={"original": _batch(test, test_vecs, original_idx), "novel": _batch(test, test_vecs, novel_idx)},
        eval_after=every_n(len(stream_idx), every),
        heldout=tuple(labels[i] for i in held_idx),
        info={"n_heldout": n_heldout, "eval_cap": eval_cap, "every": every},
    )


def _batch(split, vecs: np.ndarray, idx: np.ndarray) -> Batch:
    texts = None if split.texts is None else [split.texts[i] for i in idx]
    return Batch(np.ascontiguousarray(vecs[idx]), texts, [split.labels[i] for i in idx])
