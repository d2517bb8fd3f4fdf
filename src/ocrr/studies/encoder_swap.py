"""The encoder swap (``ocrr sweep --preset encoders``): does the substrate's lead hold under every encoder?

Every retrieval system of the main sweep reads the same frozen sentence vectors, so the paper's
ranking could belong to one encoder. The preset runs the main sweep's systems under each
packaged encoder (``minilm``, its int8 export ``minilm_int8``, the 3-layer
``paraphrase_minilm_l3`` and averaged ``glove`` word vectors), on both datasets and all three
policies; this module adds what the sweep does not measure and the study's own tables:

* ``encoder_costs.csv``: the encoding cost per 1,000 sentences of each encoder on each dataset,
  timed on the dataset's first 1,000 training texts (best of three passes after the model is
  loaded, the load timed apart), beside the whole dataset's encoding time when the embedding
  cache recorded it. Seconds are measurements: they vary with the machine and its load, and
  never enter the runs' results.
* ``encoders.md`` and the report section (``ocrr report OUT``): per dataset, policy and
  encoder, the substrate's final accuracies, the best of the paper's baselines, and the
  substrate's lead over it on the mean of final novel and final original accuracy (recovering
  the new classes without forgetting the old ones; a system that only does one scores half).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ocrr.data import load_dataset
from ocrr.encoders import embed_dataset, encode_timed, make_encoder
from ocrr.engine.results import markdown
from ocrr.engine.sweep import load_results, run_sweep
from ocrr.engine.sweep.grid import EMBEDDING_ONLY, Grid, resolve_grid
from ocrr.engine.sweep.presets import MAIN_SWEEP_SYSTEMS, PRESETS
from ocrr.errors import OcrrError
from ocrr.protocols import PROTOCOLS
from ocrr.report.presentation import FolderSection, register_folder_section
from ocrr.utils.files import atomic_write_text

PRESET = "encoders"
COST_FILE = "encoder_costs.csv"
SAMPLE = 1000  # texts timed per (dataset, encoder)
REPEATS = 3  # timed passes; the best is kept (contention only ever adds time)
SUBSTRATE = "substrate"
# the paper's baselines; ocrr's consolidating memory is built on the substrate, so it is shown apart
BASELINES = [s for s in MAIN_SWEEP_SYSTEMS if s != SUBSTRATE]
CONSOLIDATING = "consolidating"
ORDER = {  # tables list the preset's encoders and policies in its order, any others after them
    "encoder": PRESETS[PRESET]["encoders"],
    "policy": PRESETS[PRESET]["policies"],
}


def time_encoder(spec: str, texts: list[str], repeats: int = REPEATS) -> dict:
    """Load ``spec`` and time it on ``texts``: load seconds, best-of-``repeats`` seconds per
    1,000 texts, sentences per second, dimension, threads."""
    if not texts:
        raise OcrrError(f"cannot time encoder {spec}: no texts. Give a dataset with training texts.")
    encoder = make_encoder(spec)
    warm, first = encode_timed(encoder, texts[: min(8, len(texts))])  # loads the model (timed apart)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        encoder.encode(texts)
        best = min(best, time.perf_counter() - started)
    return {
        "encoder": spec,
        "dim": int(warm.shape[1]),
        "sample_texts": len(texts),
        "load_s": round(first.load_seconds, 3),
        "s_per_1k": round(1000 * best / len(texts), 3),
        "sentences_per_s": round(len(texts) / best, 1),
        "passes": repeats,
        "threads": first.threads,
        "machine": first.machine,
    }


def measure_costs(
    grid: Grid, sample: int = SAMPLE, repeats: int = REPEATS, say: Callable[[str], object] = print
) -> pd.DataFrame:
    """One row per (dataset, encoder) of the grid: the timed sample, and the whole dataset's
    encoding time as the embedding cache recorded it (blank when it did not)."""
    rows = []
    for name in grid.datasets:
        if name in EMBEDDING_ONLY:
            continue  # carries its own vectors: nothing to encode
        dataset = load_dataset(name, data_dir=grid.data_dir, **grid.options_for(name))
        texts = list(dataset.train.texts or [])[:sample]
        for spec in grid.encoders:
            say(f"timing encoder {spec} on {len(texts)} {name} texts ({repeats} passes)")
            row = {"dataset": name, **time_encoder(spec, texts, repeats)}
            cost = embed_dataset(dataset, spec).cost  # cached by the sweep: no encoding here
            row["dataset_texts"] = len(dataset.train) + len(dataset.test)
            row["dataset_encode_s"] = round(cost.encode_seconds, 2) if cost is not None else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def run_encoder_study(
    grid: Grid,
    out: str | Path,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress=None,
    say: Callable[[str], object] = print,
    sample: int = SAMPLE,
    repeats: int = REPEATS,
) -> dict:
    """The sweep (resumable), then the encoding costs, then encoders.md; returns
    {"sweep": SweepResult, "costs": DataFrame, "files": [paths]}."""
    out = Path(out)
    result = run_sweep(grid, out, executor=executor, jobs=jobs, address=address, progress=progress)
    if result.failed:
        task, message = result.failed[0]
        raise OcrrError(
            f"encoder swap: {len(result.failed)} run(s) failed, e.g. {task.system} under {task.encoder} "
            f"seed {task.seed}: {message}. Fix the cause and run the same command again: finished runs are kept."
        )
    costs, files = finish_study(grid, out, result.results, sample, repeats, say)
    return {"sweep": result, "costs": costs, "files": files}


def finish_study(
    grid: Grid,
    out: str | Path,
    results: pd.DataFrame,
    sample: int = SAMPLE,
    repeats: int = REPEATS,
    say: Callable[[str], object] = print,
) -> tuple[pd.DataFrame, list[Path]]:
    """After the sweep of ``grid`` into ``out`` (``results``: its consolidated table): time the
    encoders, write encoder_costs.csv and encoders.md. ``ocrr sweep --preset encoders`` calls it."""
    out = Path(out)
    costs = measure_costs(grid, sample, repeats, say)
    costs.to_csv(out / COST_FILE, index=False)
    atomic_write_text(out / "encoders.md", study_markdown(results, costs))
    return costs, [out / COST_FILE, out / "encoders.md"]


def default_grid(**options) -> Grid:
    """The preset's grid with command-line style overrides (``datasets=["demo"]``, ...)."""
    return resolve_grid(PRESET, None, **options)


# -- the tables --------------------------------------------------------------------------------


def final_scores(results: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, policy, encoder, system): mean over seeds of final novel and original
    accuracy, their mean (``score``) and the number of seeds."""
    runs = PROTOCOLS["heldout"]().per_run(results[results["protocol"] == "heldout"])
    runs = runs.assign(score=(runs["final_novel"] + runs["final_original"]) / 2)
    keys = ["dataset", "policy", "encoder", "system"]
    return (
        runs.groupby(keys, sort=False)
        .agg(
            novel=("final_novel", "mean"),
            original=("final_original", "mean"),
            score=("score", "mean"),
            seeds=("seed", "nunique"),
        )
        .reset_index()
    )


def lead_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, policy, encoder): the substrate, the best paper baseline by score,
    the substrate's lead over it, its rank among all systems, and consolidating's score."""
    rows = []
    for (dataset, policy, encoder), cell in scores.groupby(["dataset", "policy", "encoder"], sort=False):
        by_system = cell.set_index("system")
        if SUBSTRATE not in by_system.index:
            continue
        mine = by_system.loc[SUBSTRATE]
        others = by_system[by_system.index.isin(BASELINES)]
        best = others["score"].idxmax() if len(others) else None
        rank = int((by_system["score"] > mine["score"]).sum()) + 1
        rows.append(
            {
                "dataset": dataset,
                "policy": policy,
                "encoder": encoder,
                "substrate_novel": mine["novel"],
                "substrate_original": mine["original"],
                "substrate_score": mine["score"],
                "best_baseline": best,
                "baseline_novel": others.loc[best, "novel"] if best else np.nan,
                "baseline_original": others.loc[best, "original"] if best else np.nan,
                "baseline_score": others.loc[best, "score"] if best else np.nan,
                "lead": mine["score"] - others.loc[best, "score"] if best else np.nan,
                "rank": rank,
                "systems": len(by_system),
                "consolidating_score": by_system.loc[CONSOLIDATING, "score"]
                if CONSOLIDATING in by_system.index
                else np.nan,
                "seeds": int(mine["seeds"]),
            }
        )
    leads = pd.DataFrame(rows)
    if not len(leads):
        return leads
    position = {k: {v: i for i, v in enumerate(values)} for k, values in ORDER.items()}
    key = {k: leads[k].map(lambda v, k=k: (position[k].get(v, len(position[k])), str(v))) for k in ORDER}
    order = sorted(
        range(len(leads)), key=lambda i: (leads["dataset"].iloc[i], key["policy"].iloc[i], key["encoder"].iloc[i])
    )
    return leads.iloc[order].reset_index(drop=True)


def lead_table(leads: pd.DataFrame) -> tuple[str, list, list, str]:
    header = [
        "dataset",
        "policy",
        "encoder",
        "substrate novel / original",
        "best baseline",
        "its novel / original",
        "lead",
        "substrate rank",
        "consolidating",
    ]
    body = [
        [
            r.dataset,
            r.policy,
            r.encoder,
            f"{r.substrate_novel:.3f} / {r.substrate_original:.3f}",
            str(r.best_baseline),
            f"{r.baseline_novel:.3f} / {r.baseline_original:.3f}",
            f"{r.lead:+.3f}",
            f"{r.rank} of {r.systems}",
            f"{r.consolidating_score:.3f}" if not np.isnan(r.consolidating_score) else "–",
        ]
        for r in leads.itertuples()
    ]
    seeds = ", ".join(str(s) for s in sorted(leads["seeds"].unique())) if len(leads) else "0"
    note = (
        "Final accuracies at the end of the stream, mean over seeds "
        f"({seeds} per cell). Score = (final novel + final original) / 2. Best baseline: the paper's baseline "
        f"({', '.join(BASELINES)}) with the highest score; lead = substrate's score − its score (> 0: the lead "
        "holds). Rank: the substrate's place by score among every system of the cell; consolidating: the score "
        "of ocrr's consolidating memory, built on the substrate."
    )
    return ("Does the substrate's lead hold under every encoder?", header, body, note)


def verdict_table(leads: pd.DataFrame) -> tuple[str, list, list, str]:
    """Per encoder: in how many (dataset, policy) cells the lead holds, and its smallest value."""
    body = []
    for encoder, rows in leads.groupby("encoder", sort=False):
        held = int((rows["lead"] > 0).sum())
        body.append(
            [
                encoder,
                f"{held} of {len(rows)}",
                f"{rows['lead'].min():+.3f}",
                f"{rows['lead'].mean():+.3f}",
                f"{rows['substrate_score'].mean():.3f}",
                ", ".join(sorted(set(rows["best_baseline"].dropna()))),
            ]
        )
    return (
        "The substrate's lead per encoder",
        ["encoder", "cells where it holds", "smallest lead", "mean lead", "substrate mean score", "best baselines"],
        body,
        "A cell is one (dataset, policy); lead and score as in the table above.",
    )


def cost_table(costs: pd.DataFrame) -> tuple[str, list, list, str]:
    body = [
        [
            r.encoder,
            r.dataset,
            str(r.dim),
            f"{r.s_per_1k:.3f}",
            f"{r.sentences_per_s:,.0f}",
            f"{r.load_s:.2f}",
            f"{r.dataset_encode_s:.1f} s for {r.dataset_texts:,}" if not np.isnan(r.dataset_encode_s) else "–",
        ]
        for r in costs.itertuples()
    ]
    machine = "; ".join(sorted({f"{m}, {t} threads" for m, t in zip(costs["machine"], costs["threads"])}))
    return (
        "Encoding cost per 1,000 sentences",
        ["encoder", "dataset", "dim", "s per 1k", "sentences/s", "load (s)", "whole dataset"],
        body,
        f"Timed on each dataset's first {int(costs['sample_texts'].max()) if len(costs) else SAMPLE:,} training texts, "
        f"best of {_passes(costs)} after loading the model "
        f"({machine}). Whole dataset: the encoding time the "
        "embedding cache recorded when the sweep computed the vectors ('–': computed before it recorded costs). "
        "Measurements, not results: they vary with the machine and its load.",
    )


def _passes(costs: pd.DataFrame) -> str:
    n = int(costs["passes"].max()) if len(costs) else REPEATS
    return f"{n} pass" if n == 1 else f"{n} passes"


def study_markdown(results: pd.DataFrame, costs: pd.DataFrame) -> str:
    leads = lead_rows(final_scores(results))
    lines = ["# Encoder swap", ""]
    lines.append(markdown(*verdict_table(leads)))
    lines.append(markdown(*lead_table(leads)))
    if len(costs):
        lines.append(markdown(*cost_table(costs)))
    return "\n".join(lines)


# -- `ocrr report OUT` on the study's folder ---------------------------------------------------


def is_study_folder(folder: Path) -> bool:
    """A sweep folder with the study's encoding costs beside its runs."""
    return (folder / COST_FILE).is_file() and (folder / "sweep.json").is_file()


def study_tables(folder: Path) -> list[tuple[str, list, list, str]]:
    leads = lead_rows(final_scores(load_results(folder)))
    tables = [verdict_table(leads), lead_table(leads)]
    costs = pd.read_csv(folder / COST_FILE)
    if len(costs):
        tables.append(cost_table(costs))
    return tables


register_folder_section(
    FolderSection(
        "Encoder swap: the substrate's lead and the encoding cost",
        "encoder-swap",
        is_study_folder,
        lambda folder: folder,
        study_tables,
    )
)
