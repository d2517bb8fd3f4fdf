"""The staged hyperparameter search and ``ocrr sweep --preset cmr``: picks, test table, Table 2."""

import json

import pandas as pd
import pytest

from ocrr.cli.main import main
from ocrr.engine.sweep import load_results
from ocrr.engine.sweep.search import Space, best, run_stages, stages
from ocrr.errors import OcrrError
from ocrr.protocols.cmr import CmrProtocol
from ocrr.studies.cmr_preset import CmrPlan, picked_spec, plan_from_options, run_cmr_preset, systems_to_test

CFT = {"lr": "cft", "epochs": "cft"}


def test_candidates_cross_their_grid_on_top_of_inherited_picks():
    space = Space("er", {"replay_size": [32, 64], "replay_every": [1, 3]}, CFT)
    got = space.candidates({"cft": {"lr": 0.01, "epochs": 5}})
    assert got == [
        {"lr": 0.01, "epochs": 5, "replay_size": 32, "replay_every": 1},
        {"lr": 0.01, "epochs": 5, "replay_size": 32, "replay_every": 3},
        {"lr": 0.01, "epochs": 5, "replay_size": 64, "replay_every": 1},
        {"lr": 0.01, "epochs": 5, "replay_size": 64, "replay_every": 3},
    ]
    assert space.spec(got[0]) == "er:epochs=5:lr=0.01:replay_every=1:replay_size=32"
    with pytest.raises(OcrrError, match="has no pick yet"):
        space.candidates({})


def test_stages_follow_inheritance_and_refuse_circles():
    spaces = [
        Space("mir_l2", {"l2_lambda": [0.1]}, {"lr": "cft", "candidates": "mir"}),
        Space("mir", {"candidates": [8]}, CFT),
        Space("cft", {"lr": [0.1]}),
    ]
    assert [[s.method for s in stage] for stage in stages(spaces)] == [["cft"], ["mir"], ["mir_l2"]]
    with pytest.raises(OcrrError, match="circle"):
        stages([Space("a", {}, {"x": "b"}), Space("b", {}, {"y": "a"})])
    with pytest.raises(OcrrError, match="no space of its own"):
        stages([Space("a", {}, {"x": "nobody"})])


def test_best_takes_the_highest_mean_and_the_first_of_equals():
    space = Space("cft", {"lr": [1, 2, 3]})
    scores = pd.Series(
        [0.5, 0.5, 1.0, 0.5, 0.5, 1.0], index=["cft:lr=1", "cft:lr=1", "cft:lr=2", "cft:lr=2", "cft:lr=3", "cft:lr=3"]
    )
    picked, table = best(space, {}, scores)
    assert picked == {"lr": 2} and table["score"].tolist() == [0.5, 0.75, 0.75]
    assert table["picked"].tolist() == [False, True, False]  # 2 and 3 tie at 0.7: grid order wins
    with pytest.raises(OcrrError, match="no finished validation run"):
        best(space, {}, pd.Series([], dtype=float))


def test_run_stages_searches_each_method_on_top_of_the_picks_before_it():
    calls = []

    def run_stage(specs):  # a made-up score: larger lr and l2 closer to 0.1 are better
        calls.append(specs)
        score = {
            s: float(s.split("lr=")[1].split(":")[0]) - abs(float(s.split("l2_lambda=")[1].split(":")[0]) - 0.1)
            if "l2_lambda" in s
            else float(s.split("lr=")[1].split(":")[0])
            for s in specs
        }
        return pd.Series(list(score.values()), index=list(score))

    picks, table = run_stages(
        [Space("online_l2", {"l2_lambda": [0.01, 0.1, 1.0]}, {"lr": "cft"}), Space("cft", {"lr": [0.001, 0.01]})],
        run_stage,
    )
    assert picks == {"cft": {"lr": 0.01}, "online_l2": {"lr": 0.01, "l2_lambda": 0.1}}
    assert calls == [
        ["cft:lr=0.001", "cft:lr=0.01"],
        ["online_l2:l2_lambda=0.01:lr=0.01", "online_l2:l2_lambda=0.1:lr=0.01", "online_l2:l2_lambda=1.0:lr=0.01"],
    ]
    assert table["picked"].sum() == 2


def test_test_systems_are_the_picks_their_table1_variants_and_the_ocrr_systems():
    plan = CmrPlan(
        spaces=[Space("cft", {"lr": [1]}), Space("mir", {"replay_every": [1, 3], "candidates": [8]}, CFT)],
        extra_systems=["substrate"],
    )
    picks = {"cft": {"lr": 1}, "mir": {"lr": 1, "replay_every": 1, "candidates": 8}}
    assert systems_to_test(plan, picks) == [
        "cmr_frozen",
        "cft:lr=1",
        "mir:candidates=8:lr=1:replay_every=1",
        "mir:candidates=8:lr=1:replay_every=3",
        "mir:candidates=256:lr=1:replay_every=1",
        "mir:candidates=1024:lr=1:replay_every=1",
        "substrate",
    ]


SYNTH = {"n_classes": 12, "dim": 16, "n_train_per_class": 30, "n_test_per_class": 10}


@pytest.fixture(scope="module")
def preset_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmr") / "sweep"
    plan = CmrPlan(
        dataset="synthetic",
        protocol={"T": 5, "b": 12, "n_clusters": 4, "eval_every": 2},
        val_streams=2,
        test_streams=2,
        seeds_per_stream=1,
        spaces=[
            Space("cft", {"lr": [1e-3, 3e-2], "epochs": [5]}),
            Space("er", {"replay_every": [1, 3]}, CFT),
            Space("offline_refining", {"epochs": [5]}, {"lr": "cft"}),
        ],
        extra_systems=["substrate"],
        table2=True,
        data_options=SYNTH,
    )
    return plan, out, run_cmr_preset(plan, out, executor="serial", say=lambda text: None)


def test_preset_picks_by_validation_score_and_tests_the_picks(preset_run):
    plan, out, result = preset_run
    picks = json.loads((out / "picks.json").read_text())
    search = pd.read_csv(out / "search.csv")
    assert picks == result["picks"] and set(picks) == {"cft", "er", "offline_refining"}
    for _, rows in search.groupby("method"):
        assert rows.loc[rows["picked"], "score"].iloc[0] == rows["score"].max()
        assert (rows["runs"] == plan.val_streams).all()
    # the validation scores are recomputed here from the search runs themselves
    runs = CmrProtocol().per_run(load_results(out / "search"))
    cft = runs[runs["system"].str.startswith("cft")]
    mean = cft.assign(score=cft[["oec_final", "efr_final"]].mean(axis=1)).groupby("system")["score"].mean()
    assert mean.idxmax() == "cft:" + ":".join(f"{k}={v}" for k, v in sorted(picks["cft"].items()))
    assert set(load_results(out / "search")["protocol_options"].map(lambda o: json.loads(o)["split"])) == {"val"}
    test = load_results(out / "test")
    assert set(test["protocol_options"].map(lambda o: json.loads(o)["split"])) == {"test"}
    assert set(test["system"]) == set(systems_to_test(plan, picks))
    assert sorted(test["seed"].unique()) == [0, 1]
    md = (out / "cmr.md").read_text()
    assert "Picked on the validation streams" in md and "the paper's Table 1" in md and "Table 2" in md
    assert (out / "stream.png").stat().st_size > 0


def test_table2_gain_is_the_method_minus_frozen_oec_on_the_same_streams(preset_run):
    plan, out, result = preset_run
    table2 = pd.read_csv(out / "table2.csv")
    assert set(zip(table2["beta"], table2["gamma"])) == {(0.5, 0.8), (0.1, 0.8), (0.9, 0.8), (0.5, 0.2), (0.5, 0.5)}
    extreme = load_results(out / "table2")
    extreme = extreme[extreme["protocol_options"].map(lambda o: json.loads(o)["beta"]) == 0.1]
    runs = CmrProtocol().per_run(extreme)
    assert sorted(runs.groupby("system").size()) == [plan.test_streams] * 3  # frozen, cft, er: one run per stream
    oec = runs.assign(method=runs["system"].str.split(":").str[0]).groupby("method")["oec_final"].mean()
    row = table2[(table2["method"] == "er") & (table2["beta"] == 0.1)].iloc[0]
    assert row["gain"] == pytest.approx(oec["er"] - oec["cmr_frozen"])
    # at the normal setting: the pick alone, not averaged with Table 1's variants of it
    row = table2[(table2["method"] == "er") & (table2["beta"] == 0.5) & (table2["gamma"] == 0.8)].iloc[0]
    test = CmrProtocol().per_run(load_results(out / "test"))
    er = test[test["system"] == picked_spec("er", result["picks"])]["oec_final"].mean()
    assert row["gain"] == pytest.approx(er - test[test["system"] == "cmr_frozen"]["oec_final"].mean())
    assert (table2["streams"] == plan.test_streams).all() and (table2["runs"] == plan.test_streams).all()
    row = table2[(table2["method"] == "cft") & (table2["beta"] == 0.5) & (table2["gamma"] == 0.8)].iloc[0]
    test = CmrProtocol().per_run(load_results(out / "test"))
    cft = test[test["system"].str.startswith("cft:")]["oec_final"].mean()
    frozen = test[test["system"] == "cmr_frozen"]["oec_final"].mean()
    assert row["gain"] == pytest.approx(cft - frozen)


def test_report_on_the_preset_folder_holds_table1_the_picks_and_table2(preset_run, tmp_path):
    from ocrr.report import build_report

    plan, out, result = preset_run
    report = build_report(out, tmp_path / "report")
    md = (tmp_path / "report" / "tables.md").read_text()
    assert report.tables[-2:] == [
        "Picked on the validation streams",
        "OEC^(T) gain over FrozenUpstream (the paper's Table 2)",
    ]
    cmr_md = (out / "cmr.md").read_text()
    table2 = cmr_md[cmr_md.index("## OEC^(T) gain") :]
    assert table2.strip() in md  # the same Table 2 as the preset's own cmr.md
    assert "Table 1" in md and any("stream" in str(f) for f in report.figures)


def test_rerunning_the_preset_runs_nothing_again(preset_run):
    plan, out, result = preset_run
    stamps = {p: p.stat().st_mtime_ns for p in (out / "test" / "tasks").iterdir()}
    again = run_cmr_preset(plan, out, executor="serial", say=lambda text: None)
    assert again["picks"] == result["picks"]
    assert {p: p.stat().st_mtime_ns for p in (out / "test" / "tasks").iterdir()} == stamps


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--datasets", "clinc150", "banking77"], "one dataset at a time"),
        (["--protocol", "heldout"], "runs the cmr protocol"),
        (["--protocol", "cmr:split=val"], "sets split itself"),
        (["--protocol", "cmr:beta=2"], "beta"),
    ],
)
def test_preset_options_fail_at_the_door(argv, words, capsys):
    assert main(["sweep", "--preset", "cmr", "--dry-run", *argv]) == 2
    assert words in capsys.readouterr().err


def test_preset_dry_run_says_what_it_will_do(capsys):
    assert main(["sweep", "--preset", "cmr_table2", "--dry-run", "--systems", "+knn_lm"]) == 0
    text = capsys.readouterr().out
    assert "4 validation streams of clinc150" in text and "8 streams x 3 seeds" in text and "Table 2" in text
    assert plan_from_options("cmr", systems=["+knn_lm"]).extra_systems[-1] == "knn_lm"
