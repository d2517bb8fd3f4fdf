"""Realistic feedback through the runner: exact lookahead under every option, delays delivered
in arrival order and never early, the labels the user gave, budgets, and system uncertainty."""

import dataclasses

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.engine.runner import StreamTrace, run, run_to_output
from ocrr.policies.basic import make_policy
from ocrr.policies.feedback import Feedback
from ocrr.protocols import Scenario, heldout_scenario
from ocrr.protocols.scenario import every_n
from ocrr.systems import make_system

POLICIES = [
    "oracle:noise=0.3",
    "oracle:noise=0.3:confusable",
    "oracle:delay=7",
    "oracle:delay=geometric:5",
    "oracle:budget=0.5",
    "oracle:budget=0.3:random",
    "random50:noise=0.2:delay=3:budget=0.5",
    "all:delay=geometric:2:budget=0.5",
]


@pytest.fixture(scope="module")
def scenario():
    ds = clustered_dataset(n_classes=14, dim=16, n_train=25, n_test=8, noise=0.35, seed=3)
    return heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=1, n_heldout=5)


def trace(spec, scenario, policy, lookahead, every=20):
    system = make_system(spec, labels=scenario.labels, seed=1)
    scenario = dataclasses.replace(scenario, eval_after=every_n(len(scenario.stream), every))
    t = StreamTrace(len(scenario.stream))
    points = [
        (cp.step, cp.corrections, cp.accuracy["novel"], cp.accuracy["original"])
        for cp in run(system, scenario, make_policy(policy), lookahead=lookahead, trace=t)
    ]
    return points, t.predicted, t.corrected.tolist()


@pytest.mark.parametrize("spec", ["substrate", "static_knn", "online_linear", "knn_lm", "river_logreg:subsample=100"])
@pytest.mark.parametrize("policy", POLICIES)
def test_lookahead_stays_exact_under_every_feedback_option(spec, policy, scenario):
    assert trace(spec, scenario, policy, True) == trace(spec, scenario, policy, False)


def test_options_that_are_off_give_the_plain_run(scenario):
    assert trace("substrate", scenario, "oracle:noise=0:delay=0", True) == trace("substrate", scenario, "oracle", True)


class Recorder:
    """Nearest stored vector's label; logs each correct call with the stream items predicted so far."""

    learns = True

    def __init__(self):
        self.calls, self.predicted_items = [], 0

    def fit(self, seed):
        self.vecs, self.labels = np.array(seed.vecs), list(seed.labels)
        return self

    def predict(self, batch):
        self.predicted_items += len(batch)
        return [self.labels[int(np.argmax(self.vecs @ v))] for v in batch.vecs]

    def correct(self, batch):
        self.calls.append((self.predicted_items, [v.tobytes() for v in batch.vecs], list(batch.labels)))
        self.vecs = np.vstack([self.vecs, batch.vecs])
        self.labels += list(batch.labels)

    def footprint(self):
        from ocrr.systems.base import Footprint

        return Footprint(entries=len(self.labels))


def toy(n=6, episodes=None):
    """Seed: classes a, b; stream: n items of a new class c near one another (no eval sets, so
    every predict call is a stream prediction)."""
    e = np.eye(3, dtype=np.float32)
    rng = np.random.default_rng(0)
    vecs = e[2] + 0.01 * rng.normal(size=(n, 3)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    bounds = None if episodes is None else np.arange(0, n + 1, episodes)
    return Scenario(
        "toy",
        0,
        ("a", "b", "c"),
        Batch(e[:2], None, ["a", "b"]),
        Batch(vecs, None, ["c"] * n),
        {},
        eval_after=np.array([n if episodes is None else n // episodes]),
        episode_bounds=bounds,
    )


@pytest.mark.parametrize("lookahead", [True, False])
def test_a_delayed_correction_arrives_after_its_delay_and_items_meanwhile_see_the_old_state(lookahead):
    system = Recorder()
    t = StreamTrace(6)
    list(run(system, toy(), make_policy("oracle:delay=2"), lookahead=lookahead, trace=t))
    # item 0 is corrected at time 1 and arrives at time 3: items 1 and 2 are still wrong
    assert t.predicted == ["a", "a", "a", "c", "c", "c"]
    if not lookahead:  # item by item, the items predicted so far are the stream time
        assert [(when, labels) for when, _, labels in system.calls] == [(3, ["c"]), (4, ["c"]), (5, ["c"])]
    assert t.corrected.tolist() == [True, True, True, False, False, False]


def test_corrections_in_flight_at_the_end_are_never_delivered():
    system = Recorder()
    out = run_to_output(system, toy(), make_policy("oracle:delay=5"))
    assert len(system.calls) == 1  # item 0 arrives at 6 (the end); items 1.. would arrive later
    assert out.metrics[-1]["metric"] == "online_accuracy"
    assert [r["value"] for r in out.metrics if r["metric"] == "corrections"] == [0.0, 1.0]


def test_geometric_delays_deliver_in_arrival_order_exactly_when_due():
    n = 300
    scenario = toy(n)
    system = Recorder()
    t = StreamTrace(n)
    policy = make_policy("all:delay=geometric:8")  # every item revealed: many in flight at once
    list(run(system, scenario, policy, lookahead=False, trace=t))  # item by item: predicted items = time
    fb = Feedback(policy, 0, scenario.stream, scenario.seed_set, scenario.labels)
    position = {v.tobytes(): i for i, v in enumerate(scenario.stream.vecs)}
    delivered = [(when, position[v]) for when, vecs, _ in system.calls for v in vecs]
    assert len(delivered) == len(set(p for _, p in delivered))  # each correction once
    for when, i in delivered:
        assert when == i + 1 + fb.delays[i]  # never before its time, and not later either
    arrival = [(i + 1 + fb.delays[i], i) for _, i in delivered]
    assert arrival == sorted(arrival)  # in arrival order, ties in stream order
    assert any(len(vecs) > 1 for _, vecs, _ in system.calls)  # several due at once: one call


def test_in_episodes_a_delay_moves_corrections_to_the_first_episode_end_at_or_after_arrival():
    system = Recorder()
    t = StreamTrace(6)
    list(run(system, toy(6, episodes=3), make_policy("oracle:delay=3"), trace=t))
    # episode 1's three errors are made at 3 and arrive at 6: episode 2 is predicted without them
    assert "c" not in t.predicted
    assert [(when, labels) for when, _, labels in system.calls] == [(6, ["c"] * 3)]


def test_noisy_corrections_carry_the_label_the_user_gave(scenario):
    policy = make_policy("oracle:noise=0.5:delay=4")
    system = Recorder()
    list(run(system, scenario, policy))
    fb = Feedback(policy, scenario.seed_value, scenario.stream, scenario.seed_set, scenario.labels)
    position = {v.tobytes(): i for i, v in enumerate(scenario.stream.vecs)}
    given = [(position[v], label) for _, vecs, labels in system.calls for v, label in zip(vecs, labels)]
    assert given and all(label == fb.given[i] for i, label in given)
    wrong = np.mean([label != scenario.stream.labels[i] for i, label in given])
    assert 0.3 < wrong < 0.7


@pytest.mark.parametrize("select", ["uncertainty", "random"])
def test_budget_spends_at_most_its_share_of_the_errors(select, scenario):
    t = StreamTrace(len(scenario.stream))
    full = StreamTrace(len(scenario.stream))
    list(
        run(
            make_system("online_linear", labels=scenario.labels, seed=1),
            scenario,
            make_policy(f"oracle:budget=0.3:{select}"),
            trace=t,
        )
    )
    errors = sum(p != y for p, y in zip(t.predicted, scenario.stream.labels))
    assert 0 < t.corrected.sum() <= 0.3 * errors + 1e-9
    list(run(make_system("online_linear", labels=scenario.labels, seed=1), scenario, make_policy("oracle"), trace=full))
    assert t.corrected.sum() < full.corrected.sum()


@pytest.mark.parametrize(
    "spec", ["substrate", "bounded_fifo:budget=60", "online_linear", "ewc", "knn_lm", "river_logreg:subsample=100"]
)
def test_uncertainty_is_side_effect_free_and_batched_equals_one_by_one(spec, scenario):
    system = make_system(spec, labels=scenario.labels, seed=1).fit(scenario.seed_set)
    system.correct(scenario.stream[:10])
    queries = scenario.eval_sets["novel"]
    before = system.predict(queries)
    batched = system.uncertainty(queries)
    single = np.concatenate([system.uncertainty(queries[i]) for i in range(len(queries))])
    assert batched.shape == (len(queries),) and np.allclose(
        batched, single, rtol=1e-6, atol=1e-6
    )  # float32 search: BLAS rounding
    assert system.predict(queries) == before


def test_substrate_uncertainty_is_minus_the_vote_margin():
    e = np.eye(4, dtype=np.float32)
    sub = make_system("substrate:k=3").fit(Batch(e[[0, 0, 0, 1]], None, ["a", "a", "a", "b"]))
    sure = np.array([[1, 0, 0, 0]], np.float32)  # three a-votes in the band, b outside it
    split = np.array([[0.7071, 0.7071, 0, 0]], np.float32)  # band of 3 a's and b tied in similarity
    assert sub.uncertainty(Batch(sure))[0] < sub.uncertainty(Batch(split))[0]
    assert sub.uncertainty(Batch(sure))[0] == pytest.approx(-(3 + 0.4 * 1.0))


def test_a_system_without_uncertainty_spends_the_budget_like_random_selection(scenario):
    class NoUncertainty(Recorder):
        pass

    runs = {}
    for select in ("uncertainty", "random"):
        t = StreamTrace(len(scenario.stream))
        list(run(NoUncertainty(), scenario, make_policy(f"oracle:budget=0.5:{select}"), trace=t))
        runs[select] = (t.predicted, t.corrected.tolist())
    assert runs["uncertainty"] == runs["random"]
