"""The ocl protocol (EvalOCL): the blind classifier on hand-computed toys, shift calibration,
label-chain streams, retention, and the scenario the runner gets."""

import dataclasses

import numpy as np
import pytest
from tests.conftest import clustered_dataset

from ocrr.batch import Batch
from ocrr.engine.runner import run_to_output
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols import Scenario, make_protocol
from ocrr.protocols.ocl import label_chain_order, prefix_accuracy, window_ends
from ocrr.studies.calibrate_shift import blind_accuracy, calibrate, calibrate_protocol, chance_level, powers_of_two
from ocrr.systems import make_system
from ocrr.systems.blind import mode_newest_wins

TOY = list("AABBCCAABBCC")


@pytest.mark.parametrize("shift, expected", [(0, 6 / 11), (1, 0 / 10), (4, 3 / 7), (5, 6 / 6)])
def test_blind_k1_on_the_hand_computed_toy(shift, expected):
    assert blind_accuracy(TOY, batch=1, k=1, shift=shift) == pytest.approx(expected)


@pytest.mark.parametrize("shift, expected", [(0, 6 / 11), (1, 0 / 10), (4, 3 / 7), (5, 6 / 6)])
def test_the_runner_with_the_blind_system_gives_the_same_toy_values(shift, expected):
    e = np.eye(3, dtype=np.float32)
    stream = Batch(e[[ord(c) - ord("A") for c in TOY]], None, TOY)
    scenario = Scenario("toy", 0, ("A", "B", "C"), Batch(e[:0], None, []), stream, {}, shift=shift)
    out = run_to_output(make_system("blind:k=1", labels=["A", "B", "C"]), scenario, make_policy("all"))
    final = [r["value"] for r in out.metrics if r["metric"] == "near_future_accuracy"][-1]
    assert final == pytest.approx(expected)


def test_calibration_of_the_toy_gives_s_star_1():
    cal = calibrate([TOY], batch=1, ks=[1, 2, 4, 8], shifts=[0, 1, 2, 4, 8])
    assert cal.chance == pytest.approx(1 / 3)
    assert cal.shift == 1
    assert cal.best.set_index("shift").loc[0, "a_star"] == pytest.approx(6 / 11)
    # the whole curve is kept, and it is not monotone (A*(4) is back above chance)
    assert cal.best.set_index("shift").loc[4, "a_star"] > cal.chance + 0.01
    assert set(cal.curve["k"]) == {1, 2, 4, 8}


def test_mode_ties_go_to_the_newest_label_and_partial_windows_count():
    assert mode_newest_wins(["A", "B"]) == "B"
    assert mode_newest_wins(["A", "A", "B"]) == "A"
    assert mode_newest_wins(["B", "A", "A", "B"]) == "B"
    assert mode_newest_wins([]) is None
    blind = make_system("blind:k=3", labels=["A", "B"]).fit(Batch(np.zeros((0, 2), np.float32), None, []))
    one = Batch(np.ones((1, 2), np.float32) / np.sqrt(2))
    assert blind.predict(one) == [None]
    blind.correct(Batch(one.vecs, None, ["A"]))
    assert blind.predict(one) == ["A"]
    blind.correct(Batch(np.repeat(one.vecs, 3, axis=0), None, ["B", "B", "A"]))
    assert blind.predict(one) == ["B"]  # window B, B, A


def test_retention_prefix_curve_of_the_hand_computed_example():
    assert prefix_accuracy([1, 1, 0, 0, 0, 1]) == pytest.approx([1, 1, 2 / 3, 0.5, 0.4, 0.5])
    assert window_ends(6, 3) == [(33, 2), (67, 4), (100, 6)]


def test_the_chain_uses_every_item_once():
    labels = [f"c{i % 7}" for i in range(300)]
    for stay in (0.0, 0.5, 0.95, 1.0):
        order = label_chain_order(labels, stay, np.random.default_rng(1))
        assert sorted(order) == list(range(300))
    # stay=1: each label in one run
    order = label_chain_order(labels, 1.0, np.random.default_rng(1))
    runs = 1 + sum(labels[a] != labels[b] for a, b in zip(order[:-1], order[1:]))
    assert runs == 7


C = 10
STREAM_DATA = clustered_dataset(n_classes=C, dim=8, n_train=300, n_test=20)  # 3000 items, balanced


def stream_labels(stay, seed):
    _, stream, _ = make_protocol(f"ocl:stay={stay}").streams(STREAM_DATA, seed)
    return [STREAM_DATA.train.labels[i] for i in stream]


def test_on_a_shuffled_stream_the_blind_classifier_is_at_chance():
    """Chance 1/C = 0.1; over 3000 items the binomial std is 0.0055: tolerance 0.02 (3.6 std)."""
    for seed in (0, 1):
        labels = stream_labels(0.0, seed)
        for k in (1, 4):
            for shift in (0, 16):
                assert abs(blind_accuracy(labels, 1, k, shift) - 1 / C) < 0.02


@pytest.mark.parametrize("stay", [0.5, 0.9])
def test_with_stay_p_the_blind_k1_online_accuracy_is_p_plus_the_rest_over_c(stay):
    """P(next label = last) = p + (1 - p)/C while every label has items left; near the end of
    the stream the pools run dry, hence the tolerance 0.03 (std ~0.006 over 3000 items)."""
    labels = stream_labels(stay, 0)
    assert abs(blind_accuracy(labels, 1, 1, 0) - (stay + (1 - stay) / C)) < 0.03


def test_ocl_scenario_streams_every_training_item_once_in_batches():
    ds = clustered_dataset(n_classes=6, n_train=20, n_test=8)
    sc = make_protocol("ocl:batch=16:stay=0.8:shift=4").build_scenario(ds, ds.train.vecs, ds.test.vecs, seed=3)
    assert len(sc.seed_set) == 0 and len(sc.stream) == len(ds.train.labels) and sc.shift == 4
    assert list(sc.episode_bounds[:3]) == [0, 16, 32] and sc.episode_bounds[-1] == len(sc.stream)
    assert sorted(map(tuple, sc.stream.vecs.tolist())) == sorted(map(tuple, ds.train.vecs.tolist()))
    assert sorted(sc.eval_sets["test"].labels) == sorted(ds.test.labels)
    one = make_protocol("ocl").build_scenario(ds, ds.train.vecs, ds.test.vecs, seed=3)
    assert one.episode_bounds is None and one.shift is None  # batch 1: the runner's one-item path
    up = make_protocol("ocl:upstream=0.25").scenario(ds, ds.train.vecs, ds.test.vecs, seed=3)
    assert len(up.seed_set) == 30 and len(up.stream) == 90


def test_ocl_run_reports_retention_and_its_curve_at_the_end_only():
    ds = clustered_dataset(n_classes=6, n_train=20, n_test=10)
    sc = make_protocol("ocl:stay=0.8:shift=4:windows=4").build_scenario(ds, ds.train.vecs, ds.test.vecs, seed=0)
    out = run_to_output(make_system("acm", labels=ds.labels), sc, make_policy("all"))
    last = max(r["step"] for r in out.metrics)
    curve = {r["metric"]: r["value"] for r in out.metrics if r["metric"].startswith("acc_past_")}
    assert sorted(curve) == ["acc_past_025", "acc_past_050", "acc_past_075", "acc_past_100"]
    assert all(r["step"] == last for r in out.metrics if r["metric"].startswith("acc_past_"))
    final_test = [r["value"] for r in out.metrics if r["metric"] == "acc_test" and r["step"] == last][0]
    assert curve["acc_past_100"] == final_test
    # the curve is the prefix accuracy of the final state on the time-ordered test stream
    acm = make_system("acm", labels=ds.labels).fit(sc.seed_set)
    acm.correct(sc.stream)
    test = sc.eval_sets["test"]
    right = [p == t for p, t in zip(acm.predict(test), test.labels)]
    assert curve["acc_past_050"] == pytest.approx(prefix_accuracy(right)[len(right) // 2 - 1])


def test_the_stream_depends_on_split_and_seed_not_on_the_system():
    p, val = make_protocol("ocl:stay=0.5"), make_protocol("ocl:stay=0.5:split=val")
    a, b = p.streams(STREAM_DATA, 0)[1], p.streams(STREAM_DATA, 0)[1]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, p.streams(STREAM_DATA, 1)[1])
    assert not np.array_equal(a, val.streams(STREAM_DATA, 0)[1])


def test_calibrate_protocol_on_validation_streams():
    cal = calibrate_protocol(STREAM_DATA, make_protocol("ocl:stay=0.9:split=val"), seeds=[0], k_max=8, s_max=256)
    assert cal.chance == pytest.approx(0.1)
    assert cal.best["shift"].tolist() == powers_of_two(256, zero=True)
    # runs of ~10 items: A*(S) >= 0.1 + 0.9 * 0.9^(S+1) is far above chance up to S=16 (0.25);
    # S* is the first S of the grid at chance + 0.01, every smaller S is above it
    a_star = cal.best.set_index("shift")["a_star"]
    assert a_star[16] > 0.2 and 16 < cal.shift <= 256
    assert a_star[cal.shift] <= 0.11 and (a_star[a_star.index < cal.shift] > 0.11).all()
    assert chance_level(["a", "a", "b"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "spec, fix",
    [
        ("ocl:stay=1.5", "stay"),
        ("ocl:batch=0", "batch"),
        ("ocl:split=train", "split"),
        ("ocl:upstream=0.95", "upstream"),
        ("ocl:speed=3", "no option speed"),
    ],
)
def test_bad_ocl_options_fail_at_the_door(spec, fix):
    with pytest.raises(OcrrError, match=fix):
        make_protocol(spec)


def test_calibration_refuses_a_protocol_without_streams():
    with pytest.raises(OcrrError, match="ocl"):
        calibrate_protocol(STREAM_DATA, make_protocol("heldout"), seeds=[0])


def test_near_future_scenario_fields_survive_replace():
    ds = clustered_dataset(n_classes=4, n_train=10, n_test=4)
    sc = make_protocol("ocl:shift=2").build_scenario(ds, ds.train.vecs, ds.test.vecs, seed=0)
    assert dataclasses.replace(sc, eval_after=None).shift == 2


def test_calibrate_shift_command(tmp_path, capsys):
    from ocrr.cli.main import main

    assert (
        main(
            [
                "calibrate-shift",
                "--dataset",
                "synthetic",
                "--protocol",
                "ocl:stay=0.9",
                "--k-max",
                "4",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "split=val" in printed and "S* = " in printed and "<- S*" in printed
    assert {p.name for p in tmp_path.iterdir()} >= {"blind_curve.csv", "blind_shift.csv", "blind_shift.png"}
    assert main(["calibrate-shift", "--dataset", "synthetic", "--protocol", "heldout"]) == 2
    assert "ocl" in capsys.readouterr().err
