"""Conformance: every registered system honours the System protocol (in the spirit of
scikit-learn's check_estimator and river's yield_checks).

The checks are parametrized over every name in the registry at collection time, so a
system another module registers is covered without touching this file. A system whose
construction or fit needs an optional extra that is not installed (an ImportError)
is skipped, saying which. Capabilities a system may declare:

* ``learns = False``: corrections never change its predictions (static strawmen), so it
  is not required to ever predict a label first seen in a correction.
* ``conformance_overrides = {...}``: hyperparameters to build it with here, so that a
  heavy system is checked in seconds (e.g. lora on a tiny random encoder). The checks
  are about the protocol, not accuracy, so a smaller configuration is a fair stand-in.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.systems import REGISTRY, Batch, make_system
from ocrr.systems.registry import _ensure_builtins
from tests.conftest import clustered_dataset

_ensure_builtins()
NAMES = sorted(REGISTRY)
SEED = 3


def batch_of(split, idx):
    idx = np.asarray(idx)
    return Batch(split.vecs[idx], [split.texts[i] for i in idx], [split.labels[i] for i in idx])


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """As the runner does (ocrr.runner.configure_threads): on a shared 2-core machine torch's
    default pool made the small models here 10-20x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def data():
    """Seed set of 8 known classes, a stream of 4 novel ones, and one eval set of both.

    Noisy enough that some predictions are wrong (tie-breaks and ranks matter), large
    enough (120 eval queries) that the substrate's incremental search cache is used, and
    64-d rather than tinier so per-weight Fisher values (EWC) are in a realistic range.
    """
    ds = clustered_dataset(n_classes=12, dim=64, n_train=20, n_test=10, noise=0.15, seed=11, name="conf")
    known = set(ds.labels[:8])
    seed = batch_of(ds.train, [i for i, l in enumerate(ds.train.labels) if l in known])
    stream = batch_of(ds.train, [i for i, l in enumerate(ds.train.labels) if l not in known])
    evalset = batch_of(ds.test, np.arange(len(ds.test)))
    return {"labels": list(ds.labels), "seed": seed, "stream": stream, "eval": evalset}


def build(name: str, data, seed: int = SEED):
    """A fitted system, or a skip when it needs an extra this environment lacks."""
    entry = REGISTRY[name]
    overrides = dict(getattr(entry.factory, "conformance_overrides", None) or {})
    try:
        if overrides:
            system = entry.factory(name=name, labels=data["labels"], seed=seed, **{**entry.defaults, **overrides})
        else:
            system = make_system(name, labels=data["labels"], seed=seed)
        return system, system.fit(data["seed"])
    except ImportError as err:
        pytest.skip(f"{name} needs an optional extra that is not installed: {err}")
    except OcrrError as err:
        if isinstance(err.__cause__, ImportError):
            pytest.skip(f"{name} needs an optional extra that is not installed: {err}")
        raise


def fitted(name, data, seed=SEED):
    system, returned = build(name, data, seed)
    return system


# Corrections in uneven batches, as a stream with a batching caller would send them.
CHUNKS = [(0, 5), (5, 6), (6, 18), (18, 19), (19, 30)]


def correct_chunks(system, stream, chunks=CHUNKS):
    for lo, hi in chunks:
        assert system.correct(stream[lo:hi]) is None


def valid_predictions(preds, n):
    return isinstance(preds, list) and len(preds) == n and all(p is None or isinstance(p, str) for p in preds)


@pytest.mark.parametrize("name", NAMES)
def test_fit_returns_self_and_predict_gives_one_label_or_none_per_item(name, data):
    system, returned = build(name, data)
    assert returned is system
    assert isinstance(system.name, str) and system.name
    for batch in (data["eval"], data["eval"][:1], data["stream"][:5]):
        preds = system.predict(batch)
        assert valid_predictions(preds, len(batch)), preds
    # a system predicts only labels it has been told about (constructor list or data)
    told = set(data["labels"]) | set(data["seed"].labels)
    assert set(system.predict(data["eval"])) - {None} <= told


@pytest.mark.parametrize("name", NAMES)
def test_empty_batches(name, data):
    system = fitted(name, data)
    empty = data["eval"][np.arange(0)]
    before = system.predict(data["eval"])
    assert system.predict(empty) == []
    system.correct(Batch(empty.vecs, [], []))
    assert system.predict(data["eval"]) == before


@pytest.mark.parametrize("name", NAMES)
def test_hyperparameters_are_constructor_arguments(name, data):
    system = fitted(name, data)
    hyper = system.hyperparameters()
    assert isinstance(hyper, dict)
    assert not any(key.endswith("_") for key in hyper), "learned state (trailing _) is not a hyperparameter"
    rebuilt = REGISTRY[name].factory(name=name, labels=data["labels"], seed=SEED, **hyper)
    assert rebuilt.hyperparameters() == hyper  # sklearn's get_params/clone invariance


@pytest.mark.parametrize("name", NAMES)
def test_correct_accepts_a_batch_and_changes_nothing_it_should_not(name, data):
    system = fitted(name, data)
    stream = data["stream"]
    vecs, labels, texts = stream.vecs.copy(), list(stream.labels), list(stream.texts)
    correct_chunks(system, stream)
    # the caller's arrays and lists are not modified
    assert np.array_equal(stream.vecs, vecs) and list(stream.labels) == labels and list(stream.texts) == texts
    before = system.predict(data["eval"])
    fp = system.footprint()
    # a batch without labels is refused, and the refusal leaves no trace
    with pytest.raises(OcrrError):
        system.correct(Batch(stream.vecs[:3], stream.texts[:3]))
    assert system.predict(data["eval"]) == before
    assert system.footprint().entries == fp.entries and system.footprint().params == fp.params


@pytest.mark.parametrize("name", NAMES)
def test_batched_predict_equals_one_by_one(name, data):
    system = fitted(name, data)
    correct_chunks(system, data["stream"], CHUNKS[:3])
    evalset = data["eval"]
    batched = system.predict(evalset)
    assert batched == [system.predict(evalset[i])[0] for i in range(len(evalset))]
    halves = system.predict(evalset[:37]) + system.predict(evalset[37:])
    assert batched == halves


@pytest.mark.parametrize("name", NAMES)
def test_predict_has_no_side_effects(name, data):
    evalset, stream = data["eval"], data["stream"]
    busy, quiet = fitted(name, data), fitted(name, data)
    first = busy.predict(evalset)
    assert busy.predict(evalset) == first  # twice in a row: the same
    for lo, hi in CHUNKS:
        busy.predict(evalset)
        busy.predict(stream)
        busy.predict(stream[lo:hi])
        busy.correct(stream[lo:hi])
        busy.predict(evalset[:10])
        quiet.correct(stream[lo:hi])
    # predicting did not change what the corrections did
    assert busy.predict(evalset) == quiet.predict(evalset)
    assert busy.predict(stream) == quiet.predict(stream)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_sequence_same_predictions(name, data):
    runs = []
    for _ in range(2):
        system = fitted(name, data, seed=7)
        out = system.predict(data["eval"])
        for lo, hi in CHUNKS:
            system.correct(data["stream"][lo:hi])
            out += system.predict(data["eval"])
        runs.append(out)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", NAMES)
def test_label_first_seen_in_a_correction(name, data):
    system = fitted(name, data)  # told the dataset's labels, which lack the new one
    item = Batch(data["stream"].vecs[:1], ["a brand new intent"], ["never_seen_label"])
    assert "never_seen_label" not in data["labels"]
    eval_before = system.predict(data["eval"])
    learned_at = None
    for i in range(100):  # one correction at a time, as the runner sends them
        system.correct(item)
        pred = system.predict(item)
        assert valid_predictions(pred, 1)
        if pred == ["never_seen_label"]:
            learned_at = i
            break
    assert valid_predictions(system.predict(data["eval"]), len(data["eval"]))
    if getattr(system, "learns", True):
        assert learned_at is not None, "a learning system should predict a corrected new label eventually"
    else:
        assert learned_at is None, "declares learns=False but picked up a correction"
        # the runner relies on this: it never re-predicts after correcting such a system
        assert system.predict(data["eval"]) == eval_before


@pytest.mark.parametrize("name", NAMES)
def test_footprint_is_reported(name, data):
    system = fitted(name, data)
    correct_chunks(system, data["stream"], CHUNKS[:2])
    fp = system.footprint()
    for field in ("entries", "params", "bytes"):
        value = getattr(fp, field)
        assert isinstance(value, (int, np.integer)) and not isinstance(value, bool), (field, value)
        assert value >= 0, (field, value)
    assert fp.bytes > 0
    assert fp.entries > 0 or fp.params > 0  # it stores something
    assert isinstance(fp.extra, dict)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_dimension_and_nan_queries_raise(name, data):
    system = fitted(name, data)
    dim = data["eval"].vecs.shape[1]
    with pytest.raises(OcrrError):
        system.predict(Batch(np.ones((2, dim + 3), np.float32) / np.sqrt(dim + 3)))
    bad = data["eval"].vecs[:3].copy()
    bad[1, 2] = np.nan
    with pytest.raises(OcrrError):
        system.predict(Batch(bad, data["eval"].texts[:3]))
    inf = data["eval"].vecs[:2].copy()
    inf[0, 0] = np.inf
    with pytest.raises(OcrrError):
        system.predict(Batch(inf, data["eval"].texts[:2]))


@pytest.mark.parametrize("name", NAMES)
def test_pickle_round_trip(name, data):
    system = fitted(name, data)
    correct_chunks(system, data["stream"], CHUNKS[:2])
    clone = pickle.loads(pickle.dumps(system))
    assert clone.predict(data["eval"]) == system.predict(data["eval"])
    # and the clone carries on exactly as the original would (RNG state included)
    for lo, hi in CHUNKS[2:]:
        system.correct(data["stream"][lo:hi])
        clone.correct(data["stream"][lo:hi])
    assert clone.predict(data["eval"]) == system.predict(data["eval"])
