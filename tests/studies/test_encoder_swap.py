"""The encoder-swap study end to end on the bundled demo set (two fast packaged encoders, a few
systems): the sweep, the measured costs, encoders.md and the report's section."""

from __future__ import annotations

import pandas as pd
import pytest

from ocrr.engine.sweep import load_results
from ocrr.engine.sweep.grid import resolve_grid
from ocrr.engine.sweep.presets import MAIN_SWEEP_SYSTEMS, PRESETS
from ocrr.errors import OcrrError
from ocrr.report import build_report
from ocrr.studies import encoder_swap
from ocrr.studies.encoder_swap import default_grid, final_scores, lead_rows, run_encoder_study, time_encoder


def test_preset_is_the_main_sweep_under_each_encoder():
    grid = default_grid()
    assert grid.encoders == ["minilm", "minilm_int8", "paraphrase_minilm_l3", "glove"]
    assert grid.systems == MAIN_SWEEP_SYSTEMS + ["consolidating"]
    assert (grid.datasets, grid.policies, grid.seeds) == (
        PRESETS["main"]["datasets"],
        PRESETS["main"]["policies"],
        [0, 1, 2],
    )
    assert len(grid.tasks(resolve=False)) == 4 * 180


def test_minilm_runs_are_the_main_sweeps():
    """The study's minilm runs have the main preset's task ids: one sweep folder serves both."""
    main = {t.task_id for t in default_grid(encoders=["minilm"]).tasks(resolve=False)}
    assert main == {t.task_id for t in resolve_grid("main").tasks(resolve=False)}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    grid = default_grid(
        datasets=["demo"],
        encoders=["paraphrase_minilm_l3", "glove"],
        policies=["oracle"],
        seeds=[0, 1],
        systems=["substrate", "static_knn", "online_linear"],
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OCRR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        result = run_encoder_study(grid, out, executor="serial", sample=40, repeats=1, say=lambda _: None)
    return out, result


def test_study_runs_end_to_end(study):
    out, result = study
    assert not result["sweep"].failed and len(result["sweep"].tasks) == 2 * 3 * 2
    costs = pd.read_csv(out / "encoder_costs.csv")
    assert list(costs["encoder"]) == ["paraphrase_minilm_l3", "glove"]
    assert list(costs["dim"]) == [384, 50] and (costs["sample_texts"] == 40).all()
    assert (costs["s_per_1k"] > 0).all() and (costs["sentences_per_s"] > 0).all()
    assert (costs["dataset_texts"] == 1140).all() and costs["dataset_encode_s"].notna().all()  # the sweep encoded them
    text = (out / "encoders.md").read_text(encoding="utf-8")
    assert "Does the substrate's lead hold under every encoder?" in text and "Encoding cost per 1,000 sentences" in text


def test_lead_is_computed_from_the_runs(study):
    out, _ = study
    scores = final_scores(load_results(out))
    leads = lead_rows(scores)
    assert list(leads["encoder"]) == ["paraphrase_minilm_l3", "glove"]  # the preset's order
    for row in leads.itertuples():
        cell = scores[(scores["encoder"] == row.encoder)].set_index("system")
        best = cell.drop("substrate")["score"].idxmax()
        assert row.best_baseline == best
        assert row.lead == pytest.approx(cell.loc["substrate", "score"] - cell.loc[best, "score"])
        assert row.seeds == 2


def test_report_has_the_study_section(study):
    out, _ = study
    assert encoder_swap.is_study_folder(out)
    report = build_report(out, out / "report")
    assert "Does the substrate's lead hold under every encoder?" in report.tables
    assert "Encoding cost per 1,000 sentences" in report.tables
    assert "Encoder swap" in report.html.read_text(encoding="utf-8")


def test_timing_needs_texts():
    with pytest.raises(OcrrError, match="cannot time encoder glove: no texts"):
        time_encoder("glove", [])
