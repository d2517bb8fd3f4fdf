"""The checks themselves: one function per property of the System protocol.

Each ``check_*`` takes a Subject (builds fresh systems) and the CheckData, and raises
AssertionError saying what went wrong. They use ``expect`` rather than ``assert`` so
they still check under ``python -O``. Which checks apply to a system depends on the
capabilities it declares (``learns``, ``reads_text``): see ``ocrr.checks.yield_checks``.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ocrr.batch import Batch
from ocrr.checks.data import SEED, CheckData, Subject
from ocrr.errors import OcrrError
from ocrr.systems.base import RUN_ARGUMENTS

# Corrections in uneven batches, as a stream with a batching caller would send them.
CHUNKS = [(0, 5), (5, 6), (6, 18), (18, 19), (19, 30)]


def expect(condition: object, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def expect_ocrr_error(call: Callable[[], object], what: str) -> None:
    """``call()`` must raise an OcrrError (the error users get, naming the fix)."""
    try:
        call()
    except OcrrError:
        return
    except Exception as err:  # noqa: BLE001 - any other type is the finding
        raise AssertionError(
            f"{what} raised {type(err).__name__}: {err}; expected an OcrrError naming the fix"
        ) from err
    raise AssertionError(f"{what} raised nothing; expected an OcrrError naming the fix")


def valid_predictions(preds: object, n: int) -> bool:
    return isinstance(preds, list) and len(preds) == n and all(p is None or isinstance(p, str) for p in preds)


def expect_predictions(preds: object, n: int, what: str) -> None:
    expect(valid_predictions(preds, n), f"{what} must return a list of {n} labels (str or None), got {preds!r:.200}")


def correct_chunks(system: Any, stream: Batch, chunks: Sequence[tuple[int, int]] = CHUNKS) -> None:
    for lo, hi in chunks:
        result = system.correct(stream[lo:hi])
        expect(result is None, f"correct() must return None, got {result!r:.100}")


def first_difference(a: list, b: list) -> str:
    """Where two prediction lists first differ, for a message."""
    if len(a) != len(b):
        return f"lengths {len(a)} and {len(b)}"
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"item {i}: {a[i]!r} vs {b[i]!r}"


def expect_same(a: list, b: list, message: str) -> None:
    if a != b:
        raise AssertionError(f"{message} (first difference at {first_difference(a, b)})")


# -- every system ------------------------------------------------------------------------------


def check_fit_returns_self_and_predicts_one_label_per_item(subject: Subject, data: CheckData) -> None:
    system = subject.build(data.labels)
    returned = subject.fit(system, data.seed)
    expect(returned is system, f"fit() must return the system itself (self), got {returned!r:.100}")
    expect(isinstance(getattr(system, "name", None), str) and system.name, "the system needs a non-empty str name")
    for batch, what in (
        (data.eval, "predict(eval set)"),
        (data.eval[:1], "predict(one item)"),
        (data.stream[:5], "predict(five stream items)"),
    ):
        expect_predictions(system.predict(batch), len(batch), what)
    # a system predicts only labels it has been told about (constructor list or data)
    assert data.seed.labels is not None  # (check data is labelled throughout)
    told = set(data.labels) | set(data.seed.labels)
    invented = set(system.predict(data.eval)) - {None} - told
    expect(not invented, f"predicted labels it was never told about: {sorted(invented)[:3]}")


def check_unfitted_system_refuses(subject: Subject, data: CheckData) -> None:
    system = subject.build(data.labels)
    expect_ocrr_error(lambda: system.predict(data.eval[:2]), "predict() before fit()")
    expect_ocrr_error(lambda: system.correct(data.stream[:1]), "correct() before fit()")


def check_predict_has_no_side_effects(subject: Subject, data: CheckData) -> None:
    evalset, stream = data.eval, data.stream
    busy, quiet = subject.fitted(data), subject.fitted(data)
    first = busy.predict(evalset)
    expect_same(busy.predict(evalset), first, "predicting the same batch twice in a row gave different labels")
    for lo, hi in CHUNKS:
        busy.predict(evalset)
        busy.predict(stream)
        busy.predict(stream[lo:hi])
        busy.correct(stream[lo:hi])
        busy.predict(evalset[:10])
        quiet.correct(stream[lo:hi])
    # predicting did not change what the corrections did
    expect_same(
        busy.predict(evalset),
        quiet.predict(evalset),
        "a system that also predicted now predicts the eval set differently from one that only "
        "learned the same corrections: predict() changed its state",
    )
    expect_same(
        busy.predict(stream),
        quiet.predict(stream),
        "a system that also predicted now predicts the stream differently from one that only "
        "learned the same corrections: predict() changed its state",
    )


def check_empty_batches(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    empty = data.eval[np.arange(0)]
    before = system.predict(data.eval)
    expect(system.predict(empty) == [], "predict() of an empty batch must return []")
    system.correct(Batch(empty.vecs, [], []))
    expect_same(system.predict(data.eval), before, "correct() of an empty batch changed the predictions")


def check_hyperparameters_are_constructor_arguments(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    expect(
        callable(getattr(system, "hyperparameters", None)),
        "no hyperparameters() method: inherit ocrr.systems.base.System or define one returning a dict",
    )
    hyper = system.hyperparameters()
    expect(isinstance(hyper, dict), f"hyperparameters() must return a dict, got {type(hyper).__name__}")
    learned = [key for key in hyper if key.endswith("_")]
    expect(not learned, f"learned state (trailing _) is not a hyperparameter: {learned}")
    run = [key for key in hyper if key in RUN_ARGUMENTS]
    expect(not run, f"{run} say which run this is; they are not hyperparameters")
    settings = [key for key in hyper if key in getattr(system, "execution_settings", ())]
    expect(
        not settings,
        f"execution settings {settings} must stay out of hyperparameters() (they are hashed into sweep task ids)",
    )
    rebuilt = subject.build(data.labels, SEED, hyperparameters=hyper)
    # scikit-learn's get_params/clone invariance: the record rebuilds the same configuration
    expect(
        rebuilt.hyperparameters() == hyper,
        f"a system built from its own hyperparameters() reports different ones: {rebuilt.hyperparameters()} vs {hyper}",
    )


def check_correct_leaves_its_input_and_refusals_untouched(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    stream = data.stream
    assert stream.labels is not None and stream.texts is not None  # (check data has both throughout)
    vecs, labels, texts = stream.vecs.copy(), list(stream.labels), list(stream.texts)
    correct_chunks(system, stream)
    expect(
        np.array_equal(stream.vecs, vecs) and list(stream.labels) == labels and list(stream.texts) == texts,
        "correct() modified the caller's vectors, labels or texts",
    )
    before = system.predict(data.eval)
    fp = system.footprint()
    # a batch without labels is refused, and the refusal leaves no trace
    expect_ocrr_error(lambda: system.correct(Batch(stream.vecs[:3], texts[:3])), "correct() without labels")
    expect_same(system.predict(data.eval), before, "a refused correct() changed the predictions")
    after = system.footprint()
    expect(
        after.entries == fp.entries and after.params == fp.params,
        f"a refused correct() changed the footprint: {fp} -> {after}",
    )


def check_batched_predict_equals_one_by_one(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    correct_chunks(system, data.stream, CHUNKS[:3])
    evalset = data.eval
    batched = system.predict(evalset)
    expect_same(
        batched,
        [system.predict(evalset[i])[0] for i in range(len(evalset))],
        "predicting the eval set at once differs from predicting it one item at a time",
    )
    expect_same(
        batched,
        system.predict(evalset[:37]) + system.predict(evalset[37:]),
        "predicting the eval set at once differs from predicting it in two parts",
    )


def check_anticipate_changes_no_prediction(subject: Subject, data: CheckData) -> None:
    """anticipate(stream), the runner's speed hint, leaves every prediction as the system
    makes it one item at a time without the hint: the stream walked in parts of 1 to 4 and 9
    items, with corrections between, and the eval set after it, against a twin with no hint."""
    hinted, plain = subject.fitted(data), subject.fitted(data)
    stream = data.stream
    expect(hinted.anticipate(stream) is None, "anticipate() must return None")
    i, sizes = 0, [1, 2, 3, 4, 9]
    while i < len(stream):
        part = stream[i : i + sizes[0]]
        expect_same(
            hinted.predict(part),
            [plain.predict(part[j])[0] for j in range(len(part))],
            f"after anticipate(stream), predicting stream items {i}..{i + len(part) - 1} differs from a "
            "system that had no hint and predicted them one at a time",
        )
        if i % 3 == 0:  # a correction between predictions, as an error would bring
            hinted.correct(part)
            plain.correct(part)
        i, sizes = i + len(part), sizes[1:] + sizes[:1]
    expect_same(
        hinted.predict(data.eval),
        plain.predict(data.eval),
        "after anticipate(stream) and the stream's corrections, the eval set is predicted differently",
    )


def check_same_seed_same_predictions(subject: Subject, data: CheckData) -> None:
    runs = []
    for _ in range(2):
        system = subject.fitted(data, seed=7)
        out = system.predict(data.eval)
        for lo, hi in CHUNKS:
            system.correct(data.stream[lo:hi])
            out += system.predict(data.eval)
        runs.append(out)
    expect_same(runs[0], runs[1], "two systems with the same seed, data and corrections predict differently")


def check_footprint_is_reported(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    correct_chunks(system, data.stream, CHUNKS[:2])
    fp = system.footprint()
    for field in ("entries", "params", "bytes"):
        value = getattr(fp, field, None)
        expect(
            isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0,
            f"footprint().{field} must be a whole number >= 0, got {value!r}",
        )
    expect(fp.bytes > 0, "footprint().bytes must be > 0")
    expect(fp.entries > 0 or fp.params > 0, "footprint() reports neither entries nor params: it stores something")
    expect(isinstance(fp.extra, dict), f"footprint().extra must be a dict, got {type(fp.extra).__name__}")


def check_bad_queries_raise_ocrr_errors(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    dim = data.eval.vecs.shape[1]
    texts = data.eval.texts
    assert texts is not None  # (check data has texts throughout)
    wrong = np.ones((2, dim + 3), np.float32) / np.sqrt(dim + 3)
    expect_ocrr_error(lambda: system.predict(Batch(wrong)), "predict() of vectors of the wrong dimension")
    nan = data.eval.vecs[:3].copy()
    nan[1, 2] = np.nan
    expect_ocrr_error(lambda: system.predict(Batch(nan, texts[:3])), "predict() of a vector with a NaN")
    inf = data.eval.vecs[:2].copy()
    inf[0, 0] = np.inf
    expect_ocrr_error(lambda: system.predict(Batch(inf, texts[:2])), "predict() of an infinite vector")


def check_pickle_round_trip(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)
    correct_chunks(system, data.stream, CHUNKS[:2])
    clone = pickle.loads(pickle.dumps(system))
    expect_same(clone.predict(data.eval), system.predict(data.eval), "an unpickled copy predicts differently")
    # and the clone carries on exactly as the original would (RNG state included)
    for lo, hi in CHUNKS[2:]:
        system.correct(data.stream[lo:hi])
        clone.correct(data.stream[lo:hi])
    expect_same(
        clone.predict(data.eval),
        system.predict(data.eval),
        "an unpickled copy learns the same corrections differently from the original",
    )


def empty_seed_set(data: CheckData) -> Batch:
    """The seed set without a single row: the right dimension, empty texts and labels (the ocl
    protocol's default ``upstream=0``); the labels are known through the constructor only."""
    return data.seed[np.arange(0)]


def a_few_corrections(data: CheckData) -> Batch:
    """Two stream items of each of two classes: a few labelled items, as a first episode brings."""
    labels = data.stream.labels
    assert labels is not None  # (check data is labelled throughout)
    classes = sorted(set(labels))[:2]
    rows = [i for c in classes for i in [j for j, label in enumerate(labels) if label == c][:2]]
    return data.stream[np.asarray(rows)]


def fitted_on_nothing(subject: Subject, data: CheckData) -> Any:
    """A new system told every label by its constructor and fitted on the empty seed set."""
    system = subject.build(data.labels)
    returned = subject.fit(system, empty_seed_set(data))
    expect(returned is system, f"fit() on an empty seed set must return the system itself, got {returned!r:.100}")
    return system


def check_fit_on_an_empty_seed_set(subject: Subject, data: CheckData) -> None:
    """Fitted on no item (labels known through the constructor only), a system answers and
    takes corrections: one told label or None per query, no error."""
    system = fitted_on_nothing(subject, data)
    told = set(data.labels)
    for batch, what in ((data.eval, "predict(eval set)"), (data.eval[:1], "predict(one item)")):
        preds = system.predict(batch)
        expect_predictions(preds, len(batch), f"fitted on an empty seed set, {what}")
        invented = set(preds) - {None} - told
        expect(
            not invented,
            f"fitted on an empty seed set, predicted labels it was never told about: {sorted(invented)[:3]}",
        )
    expect(
        system.predict(data.eval[np.arange(0)]) == [],
        "fitted on an empty seed set, predict() of an empty batch must return []",
    )
    few = a_few_corrections(data)
    correct_chunks(system, few, [(0, 1), (1, len(few))])
    after = system.predict(data.eval)
    expect_predictions(after, len(data.eval), "fitted on an empty seed set and corrected, predict(eval set)")
    invented = set(after) - {None} - told
    expect(
        not invented,
        f"fitted on an empty seed set and corrected, predicted labels it was never told about: {sorted(invented)[:3]}",
    )


# -- by capability ------------------------------------------------------------------------------

NEW_LABEL = "never_seen_label"


def _correct_a_new_label(system: Any, data: CheckData) -> int | None:
    """Correct one item to a label the system was never told about, one correction at a time
    (as the runner sends them), up to 100 times; the attempt at which it first predicts it."""
    item = Batch(data.stream.vecs[:1], ["a brand new intent"], [NEW_LABEL])
    for i in range(100):
        system.correct(item)
        if hasattr(system, "end_of_stream"):  # a system that learns offline learns when its stream ends
            system.end_of_stream()
        pred = system.predict(item)
        expect_predictions(pred, 1, "predict() after a correction")
        if pred == [NEW_LABEL]:
            return i
    return None


def check_learns_a_label_first_seen_in_a_correction(subject: Subject, data: CheckData) -> None:
    system = subject.fitted(data)  # told the dataset's labels, which lack the new one
    learned_at = _correct_a_new_label(system, data)
    expect_predictions(system.predict(data.eval), len(data.eval), "predict(eval set) after learning a new label")
    expect(
        learned_at is not None,
        "a learning system should predict a corrected new label eventually (it did not "
        "after 100 corrections); declare learns = False if corrections are ignored",
    )


def check_ignores_corrections(subject: Subject, data: CheckData) -> None:
    """learns = False: the runner relies on this, it never re-predicts after correcting such a system."""
    system = subject.fitted(data)
    before = system.predict(data.eval)
    learned_at = _correct_a_new_label(system, data)
    expect(learned_at is None, "declares learns = False but picked up a correction")
    expect_same(system.predict(data.eval), before, "declares learns = False but corrections changed its predictions")


def check_learns_after_an_empty_seed_set(subject: Subject, data: CheckData) -> None:
    """learns = True: fitted on nothing, then corrected, it predicts labels it has been shown
    (from the constructor or a correction), and picks up a new label as it would after a seed."""
    system = fitted_on_nothing(subject, data)
    few = a_few_corrections(data)
    correct_chunks(system, few, [(0, len(few))])
    preds = system.predict(few)
    expect_predictions(preds, len(few), "fitted on an empty seed set and corrected, predict(the corrected items)")
    expect(
        any(p is not None for p in preds),
        "fitted on an empty seed set and corrected with a few items, it answers None for each of them: "
        "a learning system gives a label once it has been shown some",
    )
    learned_at = _correct_a_new_label(system, data)
    expect(
        learned_at is not None,
        "fitted on an empty seed set, it does not predict a corrected new label even after 100 corrections: "
        "its labels must grow from none",
    )


def check_answers_none_after_an_empty_seed_set(subject: Subject, data: CheckData) -> None:
    """learns = False: fitted on nothing it has no evidence for any label, and corrections never
    give it one: None for every query, before and after corrections."""
    system = fitted_on_nothing(subject, data)
    expect_same(
        system.predict(data.eval),
        [None] * len(data.eval),
        "declares learns = False and was fitted on an empty seed set, so it knows no label: it must answer None",
    )
    correct_chunks(system, a_few_corrections(data))
    _correct_a_new_label(system, data)
    expect_same(
        system.predict(data.eval),
        [None] * len(data.eval),
        "declares learns = False and was fitted on an empty seed set, but answers a label after corrections",
    )


def check_refuses_batches_without_text(subject: Subject, data: CheckData) -> None:
    """reads_text = True: an embeddings-only batch ends in an error naming the fix, not a crash."""
    system = subject.fitted(data)
    expect_ocrr_error(lambda: system.predict(Batch(data.eval.vecs[:3])), "predict() of a batch without texts")
    stream, labels = data.stream, data.stream.labels
    assert labels is not None  # (check data is labelled throughout)
    expect_ocrr_error(
        lambda: system.correct(Batch(stream.vecs[:2], None, labels[:2])), "correct() of a batch without texts"
    )


def check_works_without_texts(subject: Subject, data: CheckData) -> None:
    """reads_text = False: embeddings-only data (no texts at all) gives the same predictions."""
    with_text = subject.fitted(data)
    blind = subject.build(data.labels)
    subject.fit(blind, Batch(data.seed.vecs, None, data.seed.labels))
    for lo, hi in CHUNKS:
        part = data.stream[lo:hi]
        with_text.correct(part)
        blind.correct(Batch(part.vecs, None, part.labels))
    expect_same(
        blind.predict(Batch(data.eval.vecs)),
        with_text.predict(data.eval),
        "a vector-level system (reads_text = False) predicts differently when the batches carry no texts",
    )
