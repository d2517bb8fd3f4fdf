"""Realistic feedback's draws on long streams: noise rate, confusable labels, delays, budgets,
and the policy options that name them (validated at the door)."""

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.policies.feedback import BudgetSelector, DeliveryQueue, Feedback, confusable_labels

LABELS = [f"c{j:02d}" for j in range(20)]


def long_stream(n=20000, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    vecs = rng.normal(size=(n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return Batch(vecs, None, [LABELS[j] for j in rng.integers(len(LABELS), size=n)])


def seed_set(dim=8):
    e = np.eye(dim, dtype=np.float32)
    return Batch(np.repeat(e[:4], 3, axis=0), None, [LABELS[j] for j in range(4) for _ in range(3)])


def test_plain_policies_keep_their_names_and_options_have_canonical_ones():
    for plain in ("oracle", "all", "random50", "random10", "random:0.25"):
        assert make_policy(plain).name == plain and not make_policy(plain).realistic
    assert make_policy("oracle:noise=0").name == "oracle"  # an option that is off changes nothing
    p = make_policy("Oracle:budget=0.10:delay=geometric:50:noise=0.3:confusable")
    assert p.name == "oracle:noise=0.3:confusable:delay=geometric:50:budget=0.1:uncertainty"
    assert (p.noise, p.noise_kind, p.delay, p.delay_kind, p.budget, p.select) == (
        0.3,
        "confusable",
        50.0,
        "geometric",
        0.1,
        "uncertainty",
    )
    assert make_policy(p.name) == p  # the canonical name reads back to the same policy
    assert make_policy("random:0.5:delay=200").name == "random:0.5:delay=200"


@pytest.mark.parametrize(
    "bad",
    [
        "oracle:noise=1.5",
        "oracle:noise=0.1:loud",
        "oracle:delay=-1",
        "oracle:delay=2.5",
        "oracle:delay=geometric",
        "oracle:budget=0",
        "oracle:budget=0.1:greedy",
        "oracle:speed=3",
        "oracle:confusable",
        "oracle:noise=0.1:noise=0.2",
    ],
)
def test_bad_feedback_options_fail_at_the_door_naming_the_fix(bad):
    with pytest.raises(OcrrError, match="e\\.g\\.|write|Write|give"):
        make_policy(bad)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_noise_rate_is_realised_on_a_long_stream_and_always_gives_a_wrong_label(rate):
    stream = long_stream()
    fb = Feedback(make_policy(f"oracle:noise={rate}"), 7, stream, seed_set(), LABELS)
    wrong = np.array([g != t for g, t in zip(fb.given, fb.labels)])
    sd = np.sqrt(rate * (1 - rate) / len(stream))
    assert abs(wrong.mean() - rate) < 4 * sd
    assert set(fb.given) <= set(LABELS)
    # the replacement is uniform over the 19 other labels: each gets about 1/19 of the flips
    counts = np.unique([g for g, w in zip(fb.given, wrong) if w], return_counts=True)[1]
    assert len(counts) == len(LABELS) and counts.min() > 0.7 * wrong.sum() / 19


def test_noise_is_shared_per_seed_and_lower_rates_flip_a_subset():
    stream = long_stream(5000)
    low = Feedback(make_policy("oracle:noise=0.1"), 3, stream, seed_set(), LABELS)
    high = Feedback(make_policy("random50:noise=0.3"), 3, stream, seed_set(), LABELS)
    flips_low = np.array([g != t for g, t in zip(low.given, low.labels)])
    flips_high = np.array([g != t for g, t in zip(high.given, high.labels)])
    assert not (flips_low & ~flips_high).any()
    assert all(a == b for a, b, f in zip(low.given, high.given, flips_low) if f)  # same wrong label at each rate
    other_seed = Feedback(make_policy("oracle:noise=0.1"), 4, stream, seed_set(), LABELS)
    assert other_seed.given != low.given


def test_confusable_noise_picks_the_nearest_other_seed_class():
    e = np.eye(4, dtype=np.float32)
    seed = Batch(e, None, ["a", "b", "c", "d"])
    item = np.array([[0.9, 0.3, 0.1, 0.0], [0.9, 0.3, 0.1, 0.0], [0.0, 0.0, 0.2, 0.98]], np.float32)
    # own class a is excluded -> b; a novel class x takes the nearest of all -> a; d's nearest other -> c
    assert confusable_labels(seed, item, ["a", "x", "d"]) == ["b", "a", "c"]
    stream = Batch(item, None, ["a", "x", "d"])
    fb = Feedback(make_policy("oracle:noise=1:confusable"), 0, stream, seed, ["a", "b", "c", "d", "x"])
    assert fb.given == ["b", "a", "c"]


@pytest.mark.parametrize(
    "spec, mean", [("oracle:delay=50", 50.0), ("oracle:delay=geometric:50", 50.0), ("oracle:delay=geometric:3", 3.0)]
)
def test_delays_are_realised_as_specified(spec, mean):
    fb = Feedback(make_policy(spec), 1, long_stream(), seed_set(), LABELS)
    if "geometric" in spec:
        p = 1 / (mean + 1)
        sd = np.sqrt((1 - p) / p**2 / len(fb.delays))
        assert fb.delays.min() == 0 and abs(fb.delays.mean() - mean) < 4 * sd
        assert abs((fb.delays == 0).mean() - p) < 0.02  # geometric on {0, 1, ...}: P(0) = 1 / (mean + 1)
    else:
        assert (fb.delays == 50).all()


def test_delivery_is_in_arrival_order_and_never_before_its_time():
    q = DeliveryQueue()
    for position, arrival in [(0, 10), (1, 3), (2, 10), (3, 7), (4, 3)]:
        q.push(position, arrival)
    assert q.due(2) == []
    assert q.due(3) == [1, 4]  # same arrival: stream order
    assert q.due(9) == [3]
    assert q.due(10) == [0, 2] and len(q) == 0


def test_feedback_delivers_the_given_labels_when_due():
    stream = long_stream(30)
    fb = Feedback(make_policy("oracle:delay=5:noise=1"), 0, stream, seed_set(), LABELS)
    fb.send(2, made_at=3)
    fb.send(0, made_at=1)
    assert fb.deliver(stream, 5) == ([], None)
    due, batch = fb.deliver(stream, 8)
    assert due == [0, 2] and batch.labels == [fb.given[0], fb.given[2]]
    assert all(g != t for g, t in zip(batch.labels, [stream.labels[0], stream.labels[2]]))
    assert np.array_equal(batch.vecs, stream.vecs[[0, 2]])


@pytest.mark.parametrize("fraction", [0.1, 0.5])
def test_budget_is_never_exceeded_and_nearly_spent_on_a_long_stream(fraction):
    rng = np.random.default_rng(0)
    selector = BudgetSelector(fraction)
    taken = []
    for e, score in enumerate(rng.random(20000), start=1):
        taken.append(selector.offer(score))
        assert sum(taken) <= fraction * e + 1e-9  # at every point, not just at the end
    share = np.mean(taken)
    assert fraction - 0.01 <= share <= fraction


def test_budget_takes_the_uncertain_candidates():
    rng = np.random.default_rng(1)
    scores = rng.random(20000)
    selector = BudgetSelector(0.1)
    taken = np.array([selector.offer(s) for s in scores])
    assert scores[taken].mean() > 0.85  # the top tenth of uniform scores averages 0.95
    assert np.median(scores[taken]) > np.quantile(scores, 0.85)


def test_budget_applies_to_the_base_policys_reveals_only():
    stream = long_stream(4000)
    fb = Feedback(make_policy("random50:budget=0.5:random"), 2, stream, seed_set(), LABELS)
    wrong = "no-such-label"
    revealed = [fb.reveal(i, wrong) for i in range(len(stream))]
    assert not any(r and not c for r, c in zip(revealed, fb.coins))  # never outside the coins
    assert abs(np.mean(revealed) - 0.25) < 0.02
    right = Feedback(make_policy("oracle:budget=0.5"), 2, stream, seed_set(), LABELS)
    assert not any(right.reveal(i, stream.labels[i]) for i in range(100))  # right predictions: no reveal
