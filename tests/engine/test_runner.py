"""The runner: checkpoints, the correction rule, lookahead batching's exactness, episodes,
and the recorded stream predictions with their online accuracy."""

import dataclasses

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.engine.runner import StreamTrace, run, run_to_output
from ocrr.policies.basic import make_policy
from ocrr.protocols import Scenario, heldout_scenario
from ocrr.protocols.scenario import every_n
from ocrr.systems import make_system


@pytest.fixture(scope="module")
def scenario():
    ds = clustered_dataset(n_classes=14, dim=16, n_train=25, n_test=8, noise=0.35, seed=3)
    return heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=1, n_heldout=5)


def trace(spec, scenario, policy, lookahead, every=20):
    system = make_system(spec, labels=scenario.labels, seed=1)
    scenario = dataclasses.replace(scenario, eval_after=every_n(len(scenario.stream), every))
    return [
        (cp.step, cp.corrections, cp.accuracy["novel"], cp.accuracy["original"])
        for cp in run(system, scenario, make_policy(policy), lookahead=lookahead)
    ]


@pytest.mark.parametrize(
    "spec",
    [
        "substrate",
        "static_knn",
        "static_linear",
        "online_linear",
        "knn_lm",
        "a_gem",
        "bounded_fifo:budget=60",
        "river_logreg:subsample=100",
    ],
)
@pytest.mark.parametrize("policy", ["oracle", "random50"])
def test_lookahead_batching_equals_item_by_item(spec, policy, scenario):
    assert trace(spec, scenario, policy, True) == trace(spec, scenario, policy, False)


@pytest.mark.parametrize(
    "spec, lookahead, hinted",
    [
        ("substrate", True, True),
        ("substrate", False, True),
        ("knn_lm", True, True),
        ("static_knn", True, False),  # predicted in growing windows: one matrix product each
        ("static_knn", False, True),
    ],
)
def test_a_one_item_stream_is_anticipated_once_and_changes_nothing(spec, lookahead, hinted, scenario):
    def walk(hint: bool) -> tuple[list, list]:
        system = make_system(spec, labels=scenario.labels, seed=1)
        calls: list[int] = []
        original = system.anticipate

        def spy(batch: Batch) -> None:
            calls.append(len(batch))
            if hint:
                original(batch)

        system.anticipate = spy
        cps = list(run(system, scenario, make_policy("oracle"), lookahead=lookahead))
        return [(cp.step, cp.corrections, cp.accuracy) for cp in cps], calls

    with_hint, calls = walk(True)
    assert calls == ([len(scenario.stream)] if hinted else [])
    assert with_hint == walk(False)[0]


@pytest.mark.parametrize(
    "spec, lookahead, scored_once",
    [
        ("static_knn", True, True),
        ("static_linear", True, True),
        ("static_knn", False, False),
        ("substrate", True, False),
    ],
)
def test_a_static_system_answers_its_eval_sets_once(spec, lookahead, scored_once, scenario):
    """learns = False: the fixed eval sets are scored at the first checkpoint and those scores
    repeated (item by item, without lookahead, every checkpoint scores them again)."""
    system = make_system(spec, labels=scenario.labels, seed=1)
    eval_ids = {id(batch): name for name, batch in scenario.eval_sets.items()}
    scored: list[str] = []
    original = system.predict

    def spy(batch: Batch):
        if id(batch) in eval_ids:
            scored.append(eval_ids[id(batch)])
        return original(batch)

    system.predict = spy
    cps = list(run(system, scenario, make_policy("oracle"), lookahead=lookahead))
    times = 1 if scored_once else len(cps)
    assert sorted(scored) == sorted(list(scenario.eval_sets) * times)
    assert len(cps) > 2


def test_checkpoints_and_correction_rule(scenario):
    points = trace("substrate", scenario, "oracle", True, every=20)
    steps = [p[0] for p in points]
    n = len(scenario.stream)
    assert steps == [0] + list(range(20, n, 20)) + [n]
    assert points[0][1] == 0 and points[0][2] == 0.0  # nothing learned before the stream
    corrections = [p[1] for p in points]
    assert corrections == sorted(corrections) and corrections[-1] <= n
    # random10 corrects a subset of the errors oracle would: far fewer corrections
    sparse = trace("substrate", scenario, "random10", True, every=20)
    assert sparse[-1][1] < corrections[-1]


def test_static_system_is_never_corrected_into_learning(scenario):
    points = trace("static_knn", scenario, "oracle", True)
    assert all(p[2] == 0.0 for p in points)
    assert points[-1][1] == len(scenario.stream)  # every stream item is wrong, every one is "corrected"


def test_lookahead_records_the_same_stream_predictions(scenario):
    traces = []
    for lookahead in (True, False):
        t = StreamTrace(len(scenario.stream))
        list(
            run(
                make_system("substrate", labels=scenario.labels, seed=1),
                scenario,
                make_policy("random50"),
                lookahead=lookahead,
                trace=t,
            )
        )
        traces.append((t.predicted, t.corrected.tolist()))
    assert traces[0] == traces[1]
    assert None not in traces[0][0]


class Recorder:
    """A memorising classifier that logs every call: predicts the label of the nearest stored vector."""

    learns = True

    def __init__(self):
        self.calls = []

    def fit(self, seed):
        self.vecs, self.labels = np.array(seed.vecs), list(seed.labels)
        return self

    def predict(self, batch):
        self.calls.append(("predict", len(batch)))
        return [self.labels[int(np.argmax(self.vecs @ v))] for v in batch.vecs]

    def correct(self, batch):
        self.calls.append(("correct", list(batch.labels)))
        self.vecs = np.vstack([self.vecs, batch.vecs])
        self.labels += list(batch.labels)

    def footprint(self):
        from ocrr.systems.base import Footprint

        return Footprint(entries=len(self.labels))


def toy_episodes():
    """Two known classes in the seed set; a stream of 6 items of class c in episodes of 3."""
    e = np.eye(3, dtype=np.float32)
    seed = Batch(e[:2], None, ["a", "b"])
    stream = Batch(np.repeat(e[2:], 6, axis=0), None, ["c"] * 6)
    return Scenario(
        "toy",
        0,
        ("a", "b", "c"),
        seed,
        stream,
        {"all": Batch(e, None, ["a", "b", "c"])},
        eval_after=np.array([1, 2]),
        episode_bounds=np.array([0, 3, 6]),
        stream_columns={"source": ["x", "y"] * 3},
    )


def test_an_episode_is_predicted_with_its_starting_state_then_corrected_in_one_call():
    system = Recorder()
    out = run_to_output(system, toy_episodes(), make_policy("oracle"))
    # before the stream: eval (3 items); episode 1: predict 3, one correct with all 3 errors; eval;
    # episode 2: predict 3 (all right now), no correct call; eval
    assert system.calls == [
        ("predict", 3),
        ("predict", 3),
        ("correct", ["c", "c", "c"]),
        ("predict", 3),
        ("predict", 3),
        ("predict", 3),
    ]
    assert out.predictions["predicted"] == ["a"] * 3 + ["c"] * 3  # "a": first of the tied seed rows
    assert out.predictions["corrected"] == [True] * 3 + [False] * 3
    assert out.predictions["episode"] == [0, 0, 0, 1, 1, 1] and out.predictions["step"] == [0, 0, 0, 3, 3, 3]
    assert out.predictions["source"] == ["x", "y"] * 3  # a protocol's own per-item column
    final = {r["metric"]: r["value"] for r in out.metrics if r["step"] == 6}
    assert final == {"corrections": 3.0, "acc_all": 1.0, "online_accuracy": 0.5}


def test_online_accuracy_equals_the_hand_computed_value():
    """Held-out style one-item episodes: stream c, c, d, d, c with corrections on every error.
    Predictions: c? no: the seed knows a, b only -> wrong (corrected), c right, d wrong (corrected),
    d right, c right: 3 of 5 right. Running values at steps 2 and 5: 1/2 and 3/5."""
    e = np.eye(4, dtype=np.float32)
    seed = Batch(e[:2], None, ["a", "b"])
    stream = Batch(e[[2, 2, 3, 3, 2]], None, ["c", "c", "d", "d", "c"])
    scenario = Scenario("toy", 0, ("a", "b", "c", "d"), seed, stream, {}, eval_after=np.array([2]))
    out = run_to_output(Recorder(), scenario, make_policy("oracle"))
    online = {r["step"]: r["value"] for r in out.metrics if r["metric"] == "online_accuracy"}
    assert online == {2: 0.5, 5: 0.6}
    assert out.predictions["corrected"] == [True, False, True, False, False]


def test_eval_sets_can_depend_on_the_run_so_far():
    """A CMR-style set: the errors of the last episode, re-evaluated after the correction."""
    seen = []

    def last_errors(so_far):
        idx = [i for i in so_far.last_episode() if so_far.predicted[i] != "c"]
        seen.append((so_far.step, so_far.episode, idx))
        scenario = toy_episodes()
        return {"last_errors": scenario.stream[np.asarray(idx, int)]} if idx else {}

    scenario = dataclasses.replace(toy_episodes(), dynamic_eval_sets=last_errors)
    out = run_to_output(Recorder(), scenario, make_policy("oracle"))
    assert seen == [(0, 0, []), (3, 1, [0, 1, 2]), (6, 2, [])]
    fixed = [r for r in out.metrics if r["metric"] == "acc_last_errors"]
    assert fixed == [{"step": 3, "episode": 1, "metric": "acc_last_errors", "value": 1.0}]


@pytest.mark.parametrize("spec", ["substrate", "online_linear"])
def test_policy_all_reveals_every_label_right_or_wrong(spec, scenario):
    t = StreamTrace(len(scenario.stream))
    points = list(run(make_system(spec, labels=scenario.labels, seed=1), scenario, make_policy("all"), trace=t))
    assert t.corrected.all() and points[-1].corrections == len(scenario.stream)
    # and the lookahead fast path still equals item-by-item prediction
    assert trace(spec, scenario, "all", True) == trace(spec, scenario, "all", False)
    # the substrate appends every revealed item, right ones included
    substrate = make_system("substrate", labels=scenario.labels, seed=1)
    list(run(substrate, scenario, make_policy("all")))
    assert substrate.footprint().entries == len(scenario.seed_set) + len(scenario.stream)


class _Recording:
    """Wraps a system and records the size of every batch it predicts."""

    def __init__(self, inner):
        self.inner, self.sizes = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def predict(self, batch):
        self.sizes.append(len(batch))
        return self.inner.predict(batch)


class _FirstThree(_Recording):
    """Asks to be scored on the first three items of each eval set."""

    def evaluation_subset(self, name, n):
        return np.arange(3)


def test_a_system_can_ask_to_be_scored_on_a_seeded_subset_of_each_eval_set(scenario):
    """`evaluation_subset(name, n)` (llm_icl's max_eval): checkpoints score only those rows; a
    system without it is scored on every item."""
    policy = make_policy("oracle")
    full = _Recording(make_system("substrate", labels=scenario.labels, seed=1))
    plain = list(run(full, scenario, policy, lookahead=False))
    eval_sizes = {len(b) for b in scenario.eval_sets.values()}
    assert eval_sizes <= set(full.sizes)

    picky = _FirstThree(make_system("substrate", labels=scenario.labels, seed=1))
    sampled = list(run(picky, scenario, policy, lookahead=False))
    assert not eval_sizes & set(picky.sizes) - {1}  # no full eval set was predicted
    for cp_full, cp_sub in zip(plain, sampled):
        assert cp_sub.accuracy.keys() == cp_full.accuracy.keys()
        for value in cp_sub.accuracy.values():
            assert value in (0.0, 1 / 3, 2 / 3, 1.0)  # accuracy over exactly three items
