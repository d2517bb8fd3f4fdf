"""EvalOCL's methods over embeddings: samplers, the compute budget, CosineFC, ACM."""

import numpy as np
import pytest
import torch
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.systems import make_system

_DS = clustered_dataset(n_classes=5, dim=16, n_train=20, n_test=10, noise=0.3)


class DS:
    labels = _DS.labels
    train = Batch(_DS.train.vecs, None, list(_DS.train.labels))
    test = Batch(_DS.test.vecs, None, list(_DS.test.labels))


EMPTY = Batch(np.zeros((0, 16), np.float32), None, [])


def fed(spec, n=40, batch=4):
    system = make_system(spec, labels=DS.labels, seed=0).fit(EMPTY)
    for lo in range(0, n, batch):
        system.correct(DS.train[lo : lo + batch])
    return system


def test_fifo_trains_on_the_newest_items_and_mixed_on_half_of_them():
    fifo = fed("er_fifo:batch_size=8")
    assert fifo.rehearsal_batch().tolist() == list(range(32, 40))
    mixed = fed("er_mixed:batch_size=8")
    rows = mixed.rehearsal_batch().tolist()
    assert rows[:4] == [36, 37, 38, 39] and len(rows) == 8
    uniform = fed("er_uniform:batch_size=8")
    draws = [tuple(uniform.rehearsal_batch().tolist()) for _ in range(5)]
    assert len(set(draws)) == 5 and all(len(set(d)) == 8 for d in draws)  # without replacement


@pytest.mark.parametrize("budget", [1, 10])
def test_the_budget_is_the_number_of_gradient_updates_per_incoming_batch(budget):
    system = fed(f"er_uniform:budget={budget}", n=40, batch=4)
    assert system.footprint().extra["updates"] == 10 * budget
    assert system.footprint().entries == 40  # an unbounded store of every item given


def test_a_slow_stream_learns_more_than_a_fast_one():
    test = DS.test
    acc = {
        b: np.mean([p == t for p, t in zip(fed(f"er_uniform:budget={b}:lr=0.01", n=100).predict(test), test.labels)])
        for b in (1, 10)
    }
    assert acc[10] > acc[1]


def test_cosine_fc_logits_are_sigma_times_a_cosine():
    system = fed("cosine_fc:sigma=5")
    head = system.head_
    x = torch.from_numpy(DS.test.vecs)
    with torch.no_grad():
        logits = head(x)
        sigma = float(head.sigma)
    assert not hasattr(head, "bias")
    assert sigma != 5.0  # learned
    assert float(logits.abs().max()) <= abs(sigma) + 1e-5
    # scaling an input does not change a cosine
    with torch.no_grad():
        assert torch.allclose(head(3 * x), logits, atol=1e-5)


def test_acm_is_one_nearest_neighbour_by_cosine_over_everything_given():
    acm = fed("acm", n=60)
    stored, labels = DS.train.vecs[:60], DS.train.labels[:60]
    sims = DS.test.vecs @ (stored / np.linalg.norm(stored, axis=1, keepdims=True)).T
    assert acm.predict(DS.test) == [labels[i] for i in sims.argmax(axis=1)]
    assert make_system("acm").fit(EMPTY).predict(DS.test[:2]) == [None, None]


def test_upstream_items_are_stored_and_fitted():
    system = make_system("er_uniform", labels=DS.labels, seed=0).fit(DS.train[:50])
    assert system.footprint().entries == 50
    blank = make_system("er_uniform", labels=DS.labels, seed=0).fit(EMPTY)
    right, before = (np.mean([p == t for p, t in zip(s.predict(DS.test), DS.test.labels)]) for s in (system, blank))
    assert right > 0.5 > before  # chance is 0.2: the head was fitted on the upstream items


@pytest.mark.parametrize(
    "spec, fix",
    [
        ("er_uniform:sampler=lifo", "sampler"),
        ("er_fifo:budget=0", "budget"),
        ("cosine_fc:sigma=0", "sigma"),
        ("er_mixed:head=cnn", "head"),
        ("fc_only:optimizer=adam", "optimizer"),
    ],
)
def test_bad_hyperparameters_name_the_fix(spec, fix):
    with pytest.raises(OcrrError, match=fix):
        make_system(spec)
