"""Near-future accuracy in the runner: which state predicts which item, the exactness of the
lookahead fast path with the extra queries, and that existing metrics do not move."""

import dataclasses

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.engine.runner import StreamTrace, run, run_to_output
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols import Scenario, heldout_scenario, make_protocol
from ocrr.protocols.scenario import every_n
from ocrr.systems import make_system
from ocrr.systems.base import Footprint


class Counter:
    """Predicts, for every item, how many stream items it has learned (as a label), so each
    recorded prediction says which state made it."""

    learns = True

    def fit(self, seed):
        self.learned = 0
        return self

    def predict(self, batch):
        return [str(self.learned)] * len(batch)

    def correct(self, batch):
        self.learned += len(batch)

    def footprint(self):
        return Footprint(entries=self.learned)


def counting_scenario(n: int, batch: int | None, shift: int | None) -> Scenario:
    e = np.eye(2, dtype=np.float32)
    stream = Batch(np.repeat(e[:1], n, axis=0), None, ["x"] * n)
    bounds = None if batch is None else np.arange(0, n + 1, batch)
    return Scenario("toy", 0, ("x",), Batch(e[:0], None, []), stream, {}, episode_bounds=bounds, shift=shift)


def test_the_state_after_batch_t_is_scored_on_items_2t_plus_3_and_2t_plus_4():
    """N=12, B=2, S=2 (items 1-indexed): the state after batch t (2t items learned) predicts
    items 2t+3 and 2t+4; the state before any batch asks nothing."""
    t = StreamTrace(12, shift=2)
    list(run(Counter(), counting_scenario(12, 2, 2), make_policy("all"), trace=t))
    expected = {2 * k + 3: str(2 * k) for k in range(1, 5)} | {2 * k + 4: str(2 * k) for k in range(1, 5)}
    got = {j + 1: t.ahead[j] for j in range(12) if t.asked[j]}
    assert got == expected
    # the online predictions are untouched: item 2t+1 and 2t+2 by the state after batch t
    assert t.predicted == [str(2 * (j // 2)) for j in range(12)]


def test_one_item_episodes_item_j_is_predicted_by_the_state_that_predicted_j_minus_s():
    t = StreamTrace(10, shift=3)
    list(run(Counter(), counting_scenario(10, None, 3), make_policy("all"), trace=t))
    assert [t.ahead[j] if t.asked[j] else "-" for j in range(10)] == ["-"] * 4 + [str(j - 3) for j in range(4, 10)]


@pytest.fixture(scope="module")
def heldout():
    ds = clustered_dataset(n_classes=14, dim=16, n_train=25, n_test=8, noise=0.35, seed=3)
    sc = heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=1, n_heldout=5)
    return dataclasses.replace(sc, eval_after=every_n(len(sc.stream), 20))


def traced(spec, scenario, policy, lookahead=True):
    t = StreamTrace(len(scenario.stream), scenario.shift)
    points = [
        (cp.step, cp.corrections, cp.accuracy)
        for cp in run(
            make_system(spec, labels=scenario.labels, seed=1),
            scenario,
            make_policy(policy),
            lookahead=lookahead,
            trace=t,
        )
    ]
    return points, t.predicted, t.corrected.tolist(), t.ahead, t.asked.tolist()


@pytest.mark.parametrize("spec", ["substrate", "online_linear", "knn_lm", "static_knn"])
@pytest.mark.parametrize("policy", ["oracle", "random50", "all"])
@pytest.mark.parametrize("shift", [0, 1, 7, 40])
def test_lookahead_with_near_future_queries_equals_item_by_item(spec, policy, shift, heldout):
    scenario = dataclasses.replace(heldout, shift=shift)
    fast = traced(spec, scenario, policy, lookahead=True)
    assert fast == traced(spec, scenario, policy, lookahead=False)
    # and equals the general episode path with explicit one-item episodes
    n = len(scenario.stream)
    explicit = dataclasses.replace(scenario, episode_bounds=np.arange(n + 1))
    assert fast == traced(spec, explicit, policy)
    assert sum(fast[4]) == n - 1 - shift  # every state after item 1 asked about item t + 1 + S


@pytest.mark.parametrize("spec", ["substrate", "online_linear"])
@pytest.mark.parametrize("shift", [0, 5])
def test_near_future_queries_leave_every_other_metric_as_it_was(spec, shift, heldout):
    def rows(scenario):
        out = run_to_output(make_system(spec, labels=scenario.labels, seed=1), scenario, make_policy("oracle"))
        return out.metrics, out.predictions

    plain_metrics, plain_predictions = rows(heldout)
    metrics, predictions = rows(dataclasses.replace(heldout, shift=shift))
    assert [r for r in metrics if r["metric"] != "near_future_accuracy"] == plain_metrics
    assert {k: v for k, v in predictions.items() if k != "near_future"} == plain_predictions
    assert "near_future" not in plain_predictions and not any(
        r["metric"] == "near_future_accuracy" for r in plain_metrics
    )


def test_near_future_accuracy_is_the_running_average_of_the_queries_made_so_far(heldout):
    scenario = dataclasses.replace(heldout, shift=4)
    out = run_to_output(make_system("substrate", labels=scenario.labels, seed=1), scenario, make_policy("oracle"))
    labels, ahead = scenario.stream.labels, out.predictions["near_future"]
    for row in (r for r in out.metrics if r["metric"] == "near_future_accuracy"):
        # queries by the states that predicted items 1 .. step - 1 (0-indexed), targets item + 4
        targets = [j for j in range(5, min(row["step"] + 4, len(labels)))]
        assert row["value"] == pytest.approx(np.mean([ahead[j] == labels[j] for j in targets]))


def test_shift_is_a_common_protocol_option_in_the_task_identity():
    plain = make_protocol("heldout")
    assert "shift" not in plain.canonical() and plain.shift is None  # the main job's ids do not move
    shifted = make_protocol("heldout:shift=16")
    assert shifted.canonical()["shift"] == 16 and shifted.spec().endswith(":shift=16")
    assert make_protocol("cmr:shift=64").shift == 64
    with pytest.raises(OcrrError, match="shift"):
        make_protocol("heldout:shift=-1")
    with pytest.raises(OcrrError, match="shift"):
        make_protocol("heldout:shift=1.5")
