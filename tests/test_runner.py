"""The runner: checkpoints, the correction rule, and lookahead batching's exactness."""

import numpy as np
import pytest

from ocrr.policies import make_policy
from ocrr.protocols import heldout_scenario
from ocrr.runner import run
from ocrr.systems import make_system
from tests.conftest import clustered_dataset


@pytest.fixture(scope="module")
def scenario():
    ds = clustered_dataset(n_classes=14, dim=16, n_train=25, n_test=8, noise=0.35, seed=3)
    return heldout_scenario(ds, ds.train.vecs, ds.test.vecs, seed=1, n_heldout=5)


def trace(spec, scenario, policy, lookahead, every=20):
    system = make_system(spec, labels=scenario.labels, seed=1)
    return [(cp.step, cp.corrections, cp.accuracy["novel"], cp.accuracy["original"])
            for cp in run(system, scenario, make_policy(policy), every=every, lookahead=lookahead)]


@pytest.mark.parametrize("spec", ["substrate", "static_knn", "online_linear", "knn_lm", "a_gem",
                                  "bounded_fifo:budget=60", "river_logreg:subsample=100"])
@pytest.mark.parametrize("policy", ["oracle", "random50"])
def test_lookahead_batching_equals_item_by_item(spec, policy, scenario):
    assert trace(spec, scenario, policy, True) == trace(spec, scenario, policy, False)


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
