"""A change of language: users who wrote in one language start writing in another.

Systems are fitted on the source language; the stream brings the target language's items of
the same intents (a shift of language only), corrected under the usual policies. It needs a
dataset that pairs two languages and tags each item with its language (``Split.languages``),
such as ``leyzer:source=en-US:target=es-ES``: train and test hold the source items, then the
target's.

Scenario, per run seed (the intents are those in both languages' training items, sorted):

1. held-out intents (``n_heldout``, default 0): ``default_rng(SeedSequence([seed,
   crc("language_shift")])).choice(n, size=H, replace=False)`` over the shared intents. They
   stay out of the seed set and arrive in the target language only, as the held-out classes
   of OCRR do;
2. seed set: the source language's training items of the other intents (file order);
3. eval sets: ``target`` (the target language's test items of the seed intents), ``source``
   (the source language's, what is kept) and, with held-out intents, ``novel`` (the target
   language's test items of those); a fresh ``default_rng(seed)`` caps each (in that order)
   as the held-out protocol does, then orders the stream;
4. stream: the target language's training items of every shared intent, by that generator's
   ``permutation``, then cut to ``stream_cap`` items (0: the whole stream).

Intents that only one language has are left out of everything, so a change of language is all
that moves. Results: accuracy in the target language before any correction (what the encoder
carries across on its own), at the end, on the source language, and the corrections applied
when target accuracy first reached 50 % and 70 %.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ocrr.errors import OcrrError
from ocrr.protocols.base import Option, Protocol
from ocrr.protocols.scenario import Scenario, cap_and_shuffle, crc, every_n, split_rows
from ocrr.protocols.summary import (
    CELL_KEYS,
    RUN_KEYS,
    add_online_accuracy,
    corrections_to,
    fmt_acc,
    fmt_buffer,
    fmt_corrections,
    summarise_runs,
)

THRESHOLDS = (50, 70)  # corrections until target-language accuracy first reaches N %
FINALS = ("target", "source", "novel")  # final_<set> per run; novel only with held-out intents
EXAMPLE = "--dataset leyzer:source=en-US:target=es-ES"


class LanguageShiftProtocol(Protocol):
    """Fit on the source language, stream the target language's items of the same intents;
    accuracy in the target language and in the source language every ``every`` items."""

    name = "language_shift"
    summary_text = "a change of language: fit on the source language, the stream brings the target language"
    options = {
        "n_heldout": Option(
            0, int, low=0, help="intents held out of the seed set, arriving in the target language only; 0: none"
        ),
        "stream_cap": Option(0, int, low=0, help="cap on the stream (target-language training items); 0 for none"),
        "eval_cap": Option(400, int, low=0, help="cap on each eval set; 0 for none"),
        "every": Option(50, int, low=1, help="checkpoint every N stream items"),
    }
    metrics = ("acc_target", "acc_source")  # and acc_novel when n_heldout > 0

    def scenario(self, dataset, train_vecs, test_vecs, seed):
        return language_shift_scenario(dataset, train_vecs, test_vecs, seed, **self.values)

    def summarise(self, per_checkpoint, footprints=None):
        return add_online_accuracy(summarise(per_checkpoint, footprints), per_checkpoint)

    def summary_columns(self):
        return SUMMARY_COLUMNS

    def table(self, summary):
        return table(summary)

    def per_run(self, per_checkpoint):
        return per_run(per_checkpoint)


def languages_of(dataset) -> tuple[str, str]:
    """(source, target) of a dataset pairing two languages, or the error naming one that does."""
    tags = dataset.train.languages
    if tags is None or dataset.test.languages is None or len(set(tags)) != 2:
        raise OcrrError(
            f"protocol language_shift needs a dataset pairing two languages, each item tagged with its "
            f"language; {dataset.name} is not one. Use e.g. {EXAMPLE}."
        )
    return tags[0], tags[-1]


def language_shift_scenario(
    dataset,
    train_vecs: np.ndarray,
    test_vecs: np.ndarray,
    seed: int,
    n_heldout: int = 0,
    stream_cap: int = 0,
    eval_cap: int = 400,
    every: int = 50,
) -> Scenario:
    source, target = languages_of(dataset)
    train, test = dataset.train, dataset.test
    train_lang, test_lang = np.array(train.languages, dtype=object), np.array(test.languages, dtype=object)
    train_labels, test_labels = np.array(train.labels, dtype=object), np.array(test.labels, dtype=object)
    shared = sorted(set(train_labels[train_lang == source]) & set(train_labels[train_lang == target]))
    if not 0 <= n_heldout < len(shared):
        raise OcrrError(
            f"protocol language_shift: n_heldout={n_heldout} is impossible, {dataset.name} has "
            f"{len(shared)} intents in both languages; choose between 0 and {len(shared) - 1}."
        )
    rng_heldout = np.random.default_rng(np.random.SeedSequence([int(seed), crc("language_shift")]))
    heldout = sorted(shared[i] for i in rng_heldout.choice(len(shared), size=n_heldout, replace=False))
    known = sorted(set(shared) - set(heldout))

    seed_idx = np.flatnonzero((train_lang == source) & np.isin(train_labels, known))
    stream_idx = np.flatnonzero((train_lang == target) & np.isin(train_labels, shared))
    eval_idx = {
        "target": np.flatnonzero((test_lang == target) & np.isin(test_labels, known)),
        "source": np.flatnonzero((test_lang == source) & np.isin(test_labels, known)),
    }
    if heldout:
        eval_idx["novel"] = np.flatnonzero((test_lang == target) & np.isin(test_labels, heldout))
    eval_idx, stream_idx = cap_and_shuffle(seed, eval_cap or None, eval_idx, stream_idx)
    if stream_cap:
        stream_idx = stream_idx[:stream_cap]
    return Scenario(
        protocol="language_shift",
        seed_value=seed,
        labels=dataset.labels,
        eval_after=every_n(len(stream_idx), every),
        **split_rows(dataset, train_vecs, test_vecs, seed_idx, stream_idx, eval_idx),
        heldout=tuple(heldout),
        info={
            "source": source,
            "target": target,
            "n_intents": len(shared),
            "n_heldout": n_heldout,
            "n_seed": len(seed_idx),
            "n_stream": len(stream_idx),
            **{f"n_{name}": len(idx) for name, idx in eval_idx.items()},
        },
    )


# --- results ----------------------------------------------------------------------------------


def per_run(per_checkpoint: pd.DataFrame) -> pd.DataFrame:
    """One row per run: target accuracy before the stream, final accuracies, corrections to 50/70 %."""
    rows = []
    for key, run in per_checkpoint.groupby(RUN_KEYS, sort=True):
        first, last = run.loc[run["step"].idxmin()], run.loc[run["step"].idxmax()]
        row = dict(zip(RUN_KEYS, key))
        row["start_target"] = float(first["acc_target"])
        for name in FINALS:
            row[f"final_{name}"] = float(last[f"acc_{name}"]) if f"acc_{name}" in run.columns else math.nan
        row.update(corrections=int(last["corrections"]), steps=int(last["step"]))
        for t in THRESHOLDS:
            row[f"corrections_to_{t}"] = corrections_to(run, t, "acc_target")
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(per_checkpoint: pd.DataFrame, footprints: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, encoder, policy, system): mean and std over seeds."""
    columns = ("start_target", *(f"final_{name}" for name in FINALS))
    return summarise_runs(per_run(per_checkpoint), columns, THRESHOLDS, footprints)


SUMMARY_COLUMNS = (
    CELL_KEYS
    + ["n_seeds", "start_target_mean", "start_target_std"]
    + [f"final_{name}_{s}" for name in FINALS for s in ("mean", "std")]
    + [f"corrections_to_{t}_{s}" for t in THRESHOLDS for s in ("mean", "reached")]
    + ["corrections_mean"]
)
TABLE_NOTE = (
    "Target / source: accuracy on the test items of the target and of the source language (mean ± std, "
    "population, over seeds). At start: before any correction, what the encoder carries across languages "
    "alone. →N%: corrections applied when target accuracy first reached N % (0: it started there; mean over "
    "the seeds that reached it, '(r/n)' when only r of n did, 'never' when none did). Novel: held-out intents, "
    "seen in the target language only."
)


def table(summary: pd.DataFrame) -> tuple[list[str], list[list[str]], str]:
    """system, buffer, target at start, final target, final source, (final novel), →50 %, →70 %."""
    novel = bool(len(summary) and summary["final_novel_mean"].notna().any())
    header = ["system", "buffer", "target at start", "final target", "final source"]
    header += ["final novel"] * novel + [f"→{t}%" for t in THRESHOLDS]
    rows = []
    for _, r in summary.iterrows():
        n = int(r["n_seeds"])
        finals = ("target", "source", "novel") if novel else ("target", "source")
        rows.append(
            [r["system"], fmt_buffer(r), fmt_acc(r["start_target_mean"], r["start_target_std"], n)]
            + [fmt_acc(r[f"final_{name}_mean"], r[f"final_{name}_std"], n) for name in finals]
            + [
                fmt_corrections(r[f"corrections_to_{t}_mean"], int(r[f"corrections_to_{t}_reached"]), n)
                for t in THRESHOLDS
            ]
        )
    return header, rows, TABLE_NOTE
