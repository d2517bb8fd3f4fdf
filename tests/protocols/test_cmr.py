"""The CMR protocol (Lin et al. 2022): Algorithm 1's sampler, the evaluation sets, the
metrics on a hand-computed toy through the real runner, and ocrr run / report end to end."""

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from ocrr.cli.main import main
from ocrr.data.records import Split, make_dataset
from ocrr.engine.results import wide_table
from ocrr.engine.runner import run_to_output
from ocrr.errors import OcrrError
from ocrr.policies.basic import make_policy
from ocrr.protocols import make_protocol
from ocrr.protocols.cmr import episode_counts, sample_stream, stream_shares
from ocrr.report.cmr import stream_figure
from ocrr.systems.base import Footprint

SYNTH = [
    "--dataset",
    "synthetic",
    "--data-option",
    "n_classes=12",
    "--data-option",
    "dim=16",
    "--data-option",
    "n_train_per_class=30",
    "--data-option",
    "n_test_per_class=10",
]
SMALL = "cmr:T=12:b=16:n_clusters=4:eval_every=5"


def pools(sizes, start=1000):
    out, at = [], start
    for n in sizes:
        out.append(np.arange(at, at + n))
        at += n
    return out


@pytest.mark.parametrize("b,alpha,gamma", [(64, 0.9, 0.8), (32, 0.5, 0.2), (10, 0.7, 0.3), (100, 0.29, 0.5)])
def test_episode_counts_follow_algorithm_1_exactly(b, alpha, gamma):
    assert episode_counts(2, 64, 0.9, 0.8) == (57, 5, 2)
    assert episode_counts(1, 64, 0.9, 0.8) == (64, 0, 0)
    a, g = Fraction(str(alpha)), Fraction(str(gamma))
    upstream, ood = np.arange(500), pools([200] * 4)
    items, source, majors = sample_stream(upstream, ood, 40, b, alpha, 0.5, gamma, np.random.default_rng(0))
    assert len(items) == 40 * b
    for t in range(1, 41):
        b_u = math.floor(b * a ** (t - 1))  # exact rational arithmetic
        major = math.floor((b - b_u) * g)
        assert episode_counts(t, b, alpha, gamma) == (b_u, major, b - b_u - major)
        src = source[(t - 1) * b : t * b]
        assert (src == 0).sum() == b_u
        assert (src == majors[t - 1] + 1).sum() == major
        assert ((src != 0) & (src != majors[t - 1] + 1)).sum() == b - b_u - major


@pytest.mark.parametrize("beta", [0.1, 0.5, 0.9])
def test_major_cluster_switch_rate_is_one_minus_beta(beta):
    # 10 000 transitions: the switch count is Binomial(n, 1 - beta); allow 4 standard deviations
    n = 10_000
    _, _, majors = sample_stream(np.arange(4), pools([3] * 5), n + 1, 2, 0.0, beta, 0.5, np.random.default_rng(7))
    switches = int(np.sum(np.diff(majors) != 0))
    assert abs(switches - n * (1 - beta)) <= 4 * math.sqrt(n * beta * (1 - beta))
    assert set(majors) == set(range(5))  # c_1 and the switches reach every cluster
    # beta = 1: never switches; beta = 0: always switches, to another cluster
    _, _, stay = sample_stream(np.arange(4), pools([3] * 5), 50, 2, 0.0, 1.0, 0.5, np.random.default_rng(1))
    assert len(set(stay)) == 1
    _, _, move = sample_stream(np.arange(4), pools([3] * 5), 50, 2, 0.0, 0.0, 0.5, np.random.default_rng(1))
    assert np.all(np.diff(move) != 0)


def test_no_repeat_within_an_episode_but_items_recur_across_episodes():
    b = 16
    items, _, _ = sample_stream(np.arange(20), pools([20, 20, 20]), 30, b, 0.9, 0.5, 0.8, np.random.default_rng(3))
    episodes = items.reshape(30, b)
    assert all(len(set(e)) == b for e in episodes)
    assert len(set(items)) < len(items)  # pools are never depleted


def test_pool_too_small_names_the_fix():
    with pytest.raises(OcrrError, match="lower cmr:b"):
        sample_stream(np.arange(10), pools([3, 3]), 5, 16, 0.9, 0.5, 0.8, np.random.default_rng(0))


def synthetic_scenario(spec=SMALL, seed=0):
    from ocrr.data import load_dataset

    ds = load_dataset("synthetic", n_classes=12, dim=16, n_train_per_class=30, n_test_per_class=10)
    return ds, make_protocol(spec).scenario(ds, ds.train.vecs, ds.test.vecs, seed)


def test_scenario_streams_train_items_only_and_ignores_the_run_seed():
    ds, sc = synthetic_scenario()
    train = {v.tobytes() for v in ds.train.vecs}
    test = {v.tobytes() for v in ds.test.vecs}
    assert all(v.tobytes() in train and v.tobytes() not in test for v in sc.stream.vecs)
    assert len(sc.stream) == 12 * 16 and list(sc.eval_points()) == [0, 5, 10, 12]
    upstream, ood = sc.info["upstream"], sc.info["ood"]
    assert len(upstream) == 2 and len(ood) == 2
    assert set(sc.stream_columns["cluster"]) <= set(upstream) | set(ood)
    seed_clusters = {c for c, r in zip(sc.stream_columns["cluster"], sc.stream_columns["role"]) if r == "upstream"}
    assert seed_clusters <= set(upstream)
    # same stream for another run seed; another stream index or split gives another stream
    _, again = synthetic_scenario(seed=5)
    assert np.array_equal(again.stream.vecs, sc.stream.vecs) and again.seed_value == 5
    _, other = synthetic_scenario(SMALL + ":stream=1")
    _, val = synthetic_scenario(SMALL + ":split=val")
    assert not np.array_equal(other.stream.vecs, sc.stream.vecs)
    assert not np.array_equal(val.stream.vecs, sc.stream.vecs)
    assert np.array_equal(val.eval_sets["kg"].vecs, sc.eval_sets["kg"].vecs)  # H is shared by every stream
    # streams=S: the run seed picks the stream (seed mod S), so one cell holds streams x seeds
    cycled = [synthetic_scenario(SMALL + ":streams=2", seed=s)[1] for s in (0, 1, 2)]
    assert np.array_equal(cycled[0].stream.vecs, sc.stream.vecs)
    assert np.array_equal(cycled[1].stream.vecs, other.stream.vecs)
    assert np.array_equal(cycled[2].stream.vecs, sc.stream.vecs) and cycled[1].info["stream"] == 1
    shares = stream_shares(pd.DataFrame({"episode": np.repeat(np.arange(12), 16), **sc.stream_columns}))
    assert np.allclose(shares.sum(axis=1), 1.0) and shares.loc[0, "V0"] == 1.0
    assert stream_figure(pd.DataFrame({"episode": np.repeat(np.arange(12), 16), **sc.stream_columns})).axes


def test_bad_options_fail_at_the_door(tmp_path):
    with pytest.raises(OcrrError, match="split must be one of val, test"):
        make_protocol("cmr:split=train")
    with pytest.raises(OcrrError, match="beta"):
        make_protocol("cmr:beta=1.5")
    with pytest.raises(OcrrError, match="unknown ones"):
        synthetic_scenario(SMALL + ":upstream=nope")
    with pytest.raises(OcrrError, match="does not exist"):
        synthetic_scenario(f"cmr:clusters={tmp_path / 'x.json'}")


# -- the metrics on a hand-computed toy ------------------------------------------------------

# Upstream cluster U (4 training items), OOD clusters A and B (2 each). With alpha=0, b=4,
# gamma=0.5: Q1 = the 4 U items, Q2 = Q3 = {A0, A1, B0, B1} (2 from the major, 2 from the other).
# The toy's state s = the number of correct() calls so far; RIGHT[s] = the texts it gets right.
RIGHT = [
    {"U0", "U1", "U2", "te-u0"},
    {"U0", "U1", "U3", "te-u0", "te-u1", "te-a0", "A0"},
    {"A1", "B0", "U0", "te-u0", "te-b0", "te-a0"},
    {"A0", "U0", "U1", "U2", "U3", "A1"},
]


class Scripted:
    learns = True

    def fit(self, seed):
        self.state = 0
        return self

    def predict(self, batch):
        return [label if text in RIGHT[self.state] else "wrong" for text, label in zip(batch.texts, batch.labels)]

    def correct(self, batch):
        self.state += 1

    def footprint(self):
        return Footprint()


def toy_dataset():
    train = [
        ("U0", "u1"),
        ("U1", "u1"),
        ("U2", "u2"),
        ("U3", "u2"),
        ("A0", "a1"),
        ("A1", "a1"),
        ("B0", "b1"),
        ("B1", "b1"),
    ]
    test = [("te-u0", "u1"), ("te-u1", "u2"), ("te-a0", "a1"), ("te-b0", "b1")]
    rng = np.random.default_rng(0)

    def split(rows):
        vecs = rng.standard_normal((len(rows), 4)).astype(np.float32)
        return Split(tuple(r[1] for r in rows), tuple(r[0] for r in rows), vecs / np.linalg.norm(vecs, axis=1)[:, None])

    return make_dataset("toy", split(train), split(test))


def test_each_metric_on_a_hand_computed_toy_through_the_runner(tmp_path):
    cmap = tmp_path / "clusters.json"
    cmap.write_text(json.dumps({"u1": "U", "u2": "U", "a1": "A", "b1": "B"}))
    protocol = make_protocol(f"cmr:T=3:b=4:alpha=0.0:gamma=0.5:upstream=U:eval_every=1:clusters={cmap}")
    ds = toy_dataset()
    sc = protocol.scenario(ds, ds.train.vecs, ds.test.vecs, 0)
    assert [sorted(sc.stream.texts[4 * e : 4 * e + 4]) for e in range(3)] == [
        ["U0", "U1", "U2", "U3"],
        ["A0", "A1", "B0", "B1"],
        ["A0", "A1", "B0", "B1"],
    ]
    out = run_to_output(Scripted(), sc, make_policy("oracle"))
    keys = {"dataset": "toy", "encoder": "e", "policy": "oracle", "seed": 0, "system": "scripted"}
    long = pd.DataFrame([{**keys, **r} for r in out.metrics])
    per = wide_table(long, list(keys), protocol.metrics).set_index("episode")
    nan = math.nan
    expected = {  # after episodes 0, 1, 2, 3 (E1 = {U3}, E2 = {A1, B0, B1}, E3 = {A0, B1})
        "acc_efr": [nan, 1.0, 2 / 3, 1 / 2],
        "acc_ukr": [1 / 2, 1.0, 1 / 2, 0.0],
        "acc_okr": [nan, nan, 1 / 4, 6 / 8],  # Q_<t: nothing, nothing, Q1, Q1 + Q2
        "acc_kg": [0.0, 1 / 2, 1.0, 0.0],
        "online_accuracy": [nan, 3 / 4, 4 / 8, 6 / 12],
        "corrections": [0, 1, 4, 6],
    }
    for metric, values in expected.items():
        assert np.allclose(per[metric].to_numpy(float), values, equal_nan=True), metric
    run = protocol.per_run(per.reset_index()).iloc[0]
    avg = {"efr": (1 + 2 / 3 + 1 / 2) / 3, "ukr": 1.5 / 3, "okr": 1 / 2, "csr": (3 / 4 + 1) / 3, "kg": 1.5 / 3}
    final = {"efr": 1 / 2, "ukr": 0.0, "okr": 3 / 4, "csr": 1 / 2, "kg": 0.0}
    avg["oec"] = (avg["ukr"] + avg["okr"] + avg["csr"] + avg["kg"]) / 4
    final["oec"] = (0 + 3 / 4 + 1 / 2 + 0) / 4
    for x in avg:
        assert run[f"{x}_avg"] == pytest.approx(avg[x]), x
        assert run[f"{x}_final"] == pytest.approx(final[x]), x
    summary = protocol.summarise(per.reset_index())
    assert summary["oec_final_mean"].iloc[0] == pytest.approx(0.3125)
    assert summary["oec_avg_mean"].iloc[0] == pytest.approx(avg["oec"])
    preds = pd.DataFrame(out.predictions)
    assert list(preds["cluster"][:4]) == ["U"] * 4 and set(preds["role"][:4]) == {"upstream"}
    # two stream settings of the same system and seed in one frame stay two runs, two cells
    frame = per.reset_index()
    mixed = pd.concat(
        [frame.assign(protocol_options='{"beta":0.1}'), frame.assign(protocol_options='{"beta":0.9}', acc_kg=1.0)],
        ignore_index=True,
    )
    runs = protocol.per_run(mixed)
    assert len(runs) == 2 and sorted(runs["kg_final"]) == [0.0, 1.0]
    assert sorted(protocol.summarise(mixed)["kg_final_mean"]) == [0.0, 1.0]


# -- end to end --------------------------------------------------------------------------------


def test_run_and_report_end_to_end_and_byte_identical(tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert (
            main(
                [
                    "run",
                    *SYNTH,
                    "--protocol",
                    SMALL,
                    "--systems",
                    "substrate",
                    "static_linear",
                    "online_linear",
                    "--seeds",
                    "0",
                    "1",
                    "--quiet",
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
        outs.append(out)
    for file in (
        "per_checkpoint.csv",
        "summary.csv",
        "summary.md",
        "config.json",
        "metrics.parquet",
        "predictions.parquet",
    ):
        assert (outs[0] / file).read_bytes() == (outs[1] / file).read_bytes(), file
    per = pd.read_csv(outs[0] / "per_checkpoint.csv")
    assert {"acc_efr", "acc_ukr", "acc_okr", "acc_kg", "online_accuracy"} <= set(per.columns)
    static = per[(per.system == "static_linear") & (per.episode > 0)]
    assert static["acc_efr"].notna().all() and (static["acc_efr"] == 0).all()  # FrozenUpstream fixes nothing
    assert (static.groupby("seed")["acc_ukr"].nunique() == 1).all()
    summary = pd.read_csv(outs[0] / "summary.csv")
    assert {"efr_avg_mean", "oec_avg_mean", "oec_final_mean", "oec_final_std"} <= set(summary.columns)
    assert (summary.set_index("system").loc["substrate", "efr_avg_mean"]) > 0.9
    preds = pd.read_parquet(outs[0] / "predictions.parquet")
    assert {"cluster", "role"} <= set(preds.columns)
    one = preds[(preds.system == "substrate")]
    assert one.groupby("seed")["cluster"].apply(tuple).nunique() == 1  # the stream does not follow the run seed

    assert main(["report", str(outs[0])]) == 0
    page = (outs[0] / "report" / "report.html").read_text()
    assert "cmr · synthetic" in page and "OEC^(T)" in page
    assert list((outs[0] / "report" / "figures").glob("cmr-*_curves.svg"))
    assert (outs[0] / "report" / "cmr_runs.csv").exists()
    # the stream picture (the paper's Figure 3) from the first run's per-item log
    assert list((outs[0] / "report" / "figures").glob("cmr-*_stream.svg"))
    assert "Cluster shares per episode" in page
