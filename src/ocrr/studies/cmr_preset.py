"""``ocrr sweep --preset cmr``: the CMR paper's experiment, search then test (Lin et al. 2022, Sec. 5).

1. Search (``OUT/search``): every method's candidates on the validation streams (split=val,
   one seed per stream), staged as the paper does (its Appendix A.2): continual fine-tuning's
   lr x epochs first, then each method's own arguments on top of CFT's pick. Each method
   keeps the candidate with the best mean of (OEC^(T) + EFR^(T)) / 2 over its runs.
2. Test (``OUT/test``): the picks, the paper's Table 1 variants around them (the other replay
   interval k, the other candidate pool c), FrozenUpstream, OfflineRefining and every ocrr
   system that runs without text, on the test streams (split=test), each with
   ``seeds_per_stream`` seeds: mean ± std over streams x seeds.
3. With ``table2`` (``--preset cmr_table2``): the picked methods on streams of the paper's
   extreme settings, beta in {0.1, 0.9} and gamma in {0.2, 0.5} (one seed per test stream),
   and the OEC^(T) gain of each over FrozenUpstream (its Table 2).

Files in OUT: picks.json (method -> overrides), search.csv (every candidate's score),
cmr.md (picks, the test table, Table 2), table2.csv, stream.png/.svg (test stream 0's
cluster shares per episode, the paper's Figure 3). ``ocrr report OUT/test`` draws the curves.
Every stage is a resumable sweep: re-running the command skips finished runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from ocrr.engine.results import markdown
from ocrr.engine.sweep import run_sweep
from ocrr.engine.sweep.data import load_for_scenario
from ocrr.engine.sweep.grid import Grid, canonical_system
from ocrr.engine.sweep.search import Space, run_stages
from ocrr.errors import OcrrError
from ocrr.protocols import make_protocol
from ocrr.protocols.cmr import CmrProtocol
from ocrr.report.cmr import stream_figure
from ocrr.report.presentation import FolderSection, register_folder_section
from ocrr.report.tables import order_systems
from ocrr.specs import format_spec, parse_spec, spec_name
from ocrr.utils.files import atomic_write_text

CFT = {"lr": "cft", "epochs": "cft"}
REPLAY_GRID = {"replay_size": [32, 64], "replay_every": [1, 3]}
# The paper's grids (CMR, Lin et al. 2022, appendix A.2: searched for BART-base) scaled to a
# softmax head on frozen embeddings. The L2 grid lies below the paper's {1, 5, ..., 100}: the
# penalty sums over every weight of the head, and already at 0.1 it blocks most fixes (one
# CLINC150 stream: EFR 0.14 against 0.73 at 0.01). The search's scores: docs/cmr/clinc150.md.
SEARCH_SPACES = [
    Space("cft", {"lr": [1e-3, 3e-3, 1e-2, 3e-2], "epochs": [1, 5, 10]}),
    Space("online_l2", {"l2_lambda": [0.001, 0.01, 0.1, 1.0]}, CFT),
    Space("online_ewc", {"ewc_lambda": [1, 10, 100, 1000], "ewc_gamma": [1.0, 0.9]}, CFT),
    Space("er", REPLAY_GRID, CFT),
    Space("max_loss", {**REPLAY_GRID, "candidates": [256, 1024]}, CFT),
    Space("mir", {**REPLAY_GRID, "candidates": [256, 1024]}, CFT),
    Space(
        "mir_l2",
        {"l2_lambda": [0.001, 0.01, 0.1, 1.0]},
        {**CFT, "replay_size": "mir", "replay_every": "mir", "candidates": "mir"},
    ),
    # 10 epochs scored 0.0007 above 5 on CLINC150's validation streams at twice the cost of
    # the preset's most expensive run: the grid stops at 5 to keep the preset's cost within
    # what docs/tutorials/cmr-and-evalocl.md promises
    Space("offline_refining", {"epochs": [1, 5]}, {"lr": "cft"}),
]
# Table 1 rows around the picks: the other replay interval and the other candidate pool
VARIANTS = {
    "er": {"replay_every": [1, 3]},
    "max_loss": {"replay_every": [1, 3], "candidates": [256, 1024]},
    "mir": {"replay_every": [1, 3], "candidates": [256, 1024]},
}
# ocrr's own systems beside the paper's methods: the substrate, the consolidating memory,
# kNN-LM and plain online fine-tuning. The other held-out baselines run here too (--systems
# +ewc +a_gem +lwf +static_knn; docs/cmr has them); MbPA++ (+mbpa), river's heads and LoRA
# cost minutes per run.
OCRR_SYSTEMS = ["substrate", "consolidating", "knn_lm", "online_linear"]
TABLE2_METHODS = ["cft", "online_l2", "online_ewc", "er", "max_loss", "mir", "mir_l2"]
EXTREMES = [{"beta": 0.1}, {"beta": 0.9}, {"gamma": 0.2}, {"gamma": 0.5}]


@dataclass
class CmrPlan:
    dataset: str = "clinc150"
    protocol: dict = field(default_factory=dict)  # cmr options shared by every stage (T, b, clusters, ...)
    val_streams: int = 4
    test_streams: int = 8
    seeds_per_stream: int = 3
    spaces: list = field(default_factory=lambda: list(SEARCH_SPACES))
    extra_systems: list = field(default_factory=lambda: list(OCRR_SYSTEMS))
    table2: bool = False
    data_options: dict = field(default_factory=dict)
    data_dir: str | None = None

    def protocol_spec(self, split: str, streams: int, **more) -> str:
        return format_spec("cmr", {**self.protocol, **more, "split": split, "streams": streams})

    def grid(self, specs: list[str], protocol: str, seeds: int) -> Grid:
        return Grid(
            datasets=[self.dataset],
            policies=["oracle"],
            seeds=list(range(seeds)),
            systems=list(specs),
            protocols=[protocol],
            data_options=dict(self.data_options),
            data_dir=self.data_dir,
        )


STAGED_PRESETS = ("cmr", "cmr_table2")


def plan_from_options(
    preset: str,
    datasets: list[str] | None = None,
    protocols: list[str] | None = None,
    systems: list[str] | None = None,
    data_options: dict | None = None,
    data_dir: str | None = None,
) -> CmrPlan:
    """The plan of ``--preset cmr|cmr_table2``, with what the command line may change: one
    dataset, the cmr stream options (``--protocol cmr:clusters=kmeans:...``; split and streams
    are the plan's), the ocrr systems run beside the paper's methods (``+name`` adds one)."""
    plan = CmrPlan(table2=preset == "cmr_table2", data_options=dict(data_options or {}), data_dir=data_dir)
    if datasets:
        if len(datasets) != 1:
            raise OcrrError(
                f"--preset {preset} runs one dataset at a time, got {', '.join(datasets)}. "
                "Run it once per dataset, each with its own --out."
            )
        plan.dataset = datasets[0]
    for spec in protocols or []:
        name, options = parse_spec(spec)
        if name != "cmr":
            raise OcrrError(
                f"--preset {preset} runs the cmr protocol; --protocol {spec} names another. "
                "Give cmr options only, e.g. --protocol cmr:clusters=kmeans:n_clusters=10."
            )
        fixed = sorted(set(options) & {"split", "stream", "streams"})
        if fixed:
            raise OcrrError(
                f"--preset {preset} sets {', '.join(fixed)} itself (validation, then test streams). "
                "Leave them out of --protocol."
            )
        make_protocol(spec)  # a bad option fails here, naming the fix
        plan.protocol.update(options)
    if systems:
        if all(s.startswith("+") for s in systems):
            plan.extra_systems += [s[1:] for s in systems]
        else:
            plan.extra_systems = list(systems)
    return plan


def run_cmr_preset(
    plan: CmrPlan,
    out: str | Path,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress_factory=None,
    say=print,
) -> dict:
    """Search, test (and Table 2); returns {"picks", "search", "test", "table2", "files"}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    protocol = CmrProtocol()

    def sweep(grid, folder: Path, label: str) -> pd.DataFrame:
        """Run the grid; its per-checkpoint rows."""
        say(f"{label}: {len(grid.tasks(resolve=False))} runs in {folder}/")
        result = run_sweep(
            grid,
            folder,
            executor=executor,
            jobs=jobs,
            address=address,
            progress=progress_factory() if progress_factory else None,
        )
        if result.failed:
            task, message = result.failed[0]
            raise OcrrError(
                f"{label}: {len(result.failed)} run(s) failed, e.g. {task.system} seed {task.seed}: "
                f"{message}. Fix the cause and run the same command again: finished runs are kept."
            )
        ids = {t.task_id for t in result.tasks}
        return result.results[result.results["task_id"].isin(ids)]

    def validation(specs: list[str]) -> pd.Series:
        grid = plan.grid(specs, plan.protocol_spec("val", plan.val_streams), plan.val_streams)
        runs = protocol.per_run(
            sweep(grid, out / "search", f"search ({len(specs)} candidates x {plan.val_streams} validation streams)")
        )
        score = runs[["oec_final", "efr_final"]].mean(axis=1, skipna=True)
        canonical = {canonical_system(s)[0]: s for s in specs}
        return pd.Series(score.to_numpy(), index=[canonical.get(s, s) for s in runs["system"]])

    picks, search = run_stages(plan.spaces, validation)
    _write_json(out / "picks.json", picks)
    search.to_csv(out / "search.csv", index=False)
    test_specs = systems_to_test(plan, picks)
    n_test = plan.test_streams * plan.seeds_per_stream
    test = sweep(
        plan.grid(test_specs, plan.protocol_spec("test", plan.test_streams), n_test),
        out / "test",
        f"test ({len(test_specs)} systems x {plan.test_streams} streams x {plan.seeds_per_stream} seeds)",
    )
    summary = protocol.summarise(test)
    table2 = None
    if plan.table2:
        table2 = extremes_table(plan, picks, protocol.per_run(test), lambda *a: protocol.per_run(sweep(*a)), out)
        table2.to_csv(out / "table2.csv", index=False)
    files = [out / "picks.json", out / "search.csv"] + ([out / "table2.csv"] if table2 is not None else [])
    files += draw_stream(plan, out)
    md = cmr_markdown(plan, picks, search, summary, table2, protocol)
    atomic_write_text(out / "cmr.md", md)
    files.append(out / "cmr.md")
    return {"picks": picks, "search": search, "test": test, "summary": summary, "table2": table2, "files": files}


def picked_spec(method: str, picks: dict) -> str:
    return format_spec(method, picks.get(method, {}))


def systems_to_test(plan: CmrPlan, picks: dict) -> list[str]:
    """FrozenUpstream, each pick, the Table 1 variants around the replay picks, the ocrr systems."""
    specs = ["cmr_frozen"] + [picked_spec(s.method, picks) for s in plan.spaces]
    for method, grid in VARIANTS.items():
        if method not in picks:
            continue
        for key, values in grid.items():  # only around what the search settled
            if key in picks[method]:
                specs += [format_spec(method, {**picks[method], key: v}) for v in values]
    return list(dict.fromkeys(specs + list(plan.extra_systems)))


def extremes_table(plan: CmrPlan, picks: dict, test_runs: pd.DataFrame, sweep, out: Path) -> pd.DataFrame:
    """OEC^(T) gain over FrozenUpstream per method and stream setting (the paper's Table 2).
    The normal setting reuses the test runs of the first seed of every test stream."""

    methods = [m for m in TABLE2_METHODS if m in picks]
    specs = ["cmr_frozen"] + [picked_spec(m, picks) for m in methods]
    # the picks only: the test stage also ran Table 1's variants of the same methods
    settings: list[tuple[dict[str, float], pd.DataFrame]] = [
        ({}, test_runs[(test_runs["seed"] < plan.test_streams) & test_runs["system"].isin(specs)])
    ]
    for extreme in EXTREMES:
        grid = plan.grid(specs, plan.protocol_spec("test", plan.test_streams, **extreme), plan.test_streams)
        label = ", ".join(f"{k}={v}" for k, v in extreme.items())
        settings.append(
            (
                extreme,
                sweep(grid, out / "table2", f"table 2 at {label} ({len(specs)} systems x {plan.test_streams} streams)"),
            )
        )
    rows = []
    for extreme, runs in settings:
        runs = runs.assign(method=[spec_name(s) for s in runs["system"]])
        oec = runs.groupby("method")["oec_final"].mean()
        setting = {
            "alpha": plan.protocol.get("alpha", 0.9),
            "beta": plan.protocol.get("beta", 0.5),
            "gamma": plan.protocol.get("gamma", 0.8),
            **extreme,
        }
        for m in methods:
            if m in oec.index:
                mine = runs[runs["method"] == m]
                rows.append(
                    {
                        **setting,
                        "method": m,
                        "oec_final": oec[m],
                        "frozen": oec["cmr_frozen"],
                        "gain": oec[m] - oec["cmr_frozen"],
                        "runs": len(mine),
                        "streams": mine["seed"].nunique(),
                    }
                )
    return pd.DataFrame(rows)


def draw_stream(plan: CmrPlan, out: Path) -> list[Path]:
    """Test stream 0's cluster shares per episode (the paper's Figure 3), from its scenario."""
    protocol = make_protocol(plan.protocol_spec("test", plan.test_streams))
    options = plan.grid([], "cmr", 1).options_for(plan.dataset)
    dataset, train_vecs, test_vecs = load_for_scenario(plan.dataset, options, plan.data_dir)
    scenario = protocol.scenario(dataset, train_vecs, test_vecs, 0)
    log = pd.DataFrame(
        {"episode": np.repeat(np.arange(scenario.n_episodes), np.diff(scenario.bounds())), **scenario.stream_columns}
    )
    fig = stream_figure(
        log,
        f"CMR test stream 0 of {plan.dataset}: cluster shares per episode "
        f"(V0 = upstream; beta={protocol.values['beta']}, gamma={protocol.values['gamma']})",
    )
    paths = [out / "stream.png", out / "stream.svg"]
    for path in paths:
        with matplotlib.rc_context({"svg.hashsalt": "ocrr-report"}):  # stable SVG ids: the same file every run
            fig.savefig(path, dpi=130, metadata={"Date": None} if path.suffix == ".svg" else None)
    return paths


def cmr_markdown(
    plan: CmrPlan, picks: dict, search: pd.DataFrame, summary: pd.DataFrame, table2: pd.DataFrame | None, protocol
) -> str:
    lines = [
        f"# CMR on {plan.dataset}",
        "",
        f"Streams: {plan.protocol_spec('test', plan.test_streams)}; {plan.val_streams} validation streams "
        f"(search), {plan.test_streams} test streams x {plan.seeds_per_stream} seeds.",
        "",
    ]
    lines.append(markdown(*picks_table(picks, search)))
    paper = {s.method for s in plan.spaces} | {"cmr_frozen"}
    ordered = order_systems(summary["system"])  # the paper's methods first, then the ocrr systems
    rank = {s: (spec_name(s) not in paper, i) for i, s in enumerate(ordered)}
    header, rows, note = protocol.table(summary.sort_values("system", key=lambda c: c.map(rank)))
    lines.append(markdown("Test streams (the paper's Table 1)", header, rows, note))
    if table2 is not None and len(table2):
        lines.append(markdown(*table2_table(table2, plan.test_streams)))
    return "\n".join(lines)


def picks_table(picks: dict, search: pd.DataFrame) -> tuple[str, list, list, str]:
    """(title, header, rows, note): each method's pick, its validation score, its candidates."""
    body = []
    for method, overrides in picks.items():
        rows = search[search["method"] == method]
        score = rows.loc[rows["picked"].astype(bool), "score"].iloc[0]
        body.append(
            [
                method,
                ", ".join(f"{k}={v}" for k, v in overrides.items()) or "(defaults)",
                f"{score:.4f}",
                str(len(rows)),
            ]
        )
    return (
        "Picked on the validation streams",
        ["method", "picked", "score", "candidates"],
        body,
        "score: mean over validation runs of (OEC^(T) + EFR^(T)) / 2; every candidate's score is in search.csv.",
    )


def table2_table(table2: pd.DataFrame, test_streams: int) -> tuple[str, list, list, str]:
    """(title, header, rows, note): the paper's Table 2, OEC^(T) gain over FrozenUpstream."""
    cols = sorted({(r.beta, r.gamma) for r in table2.itertuples()})
    body = []
    for m in dict.fromkeys(table2["method"]):
        t = table2[table2["method"] == m]
        cells = []
        for b, g in cols:
            hit = t[(t["beta"] == b) & (t["gamma"] == g)]
            cells.append(f"{100 * hit['gain'].iloc[0]:+.2f}" if len(hit) else "–")
        body.append([m] + cells)
    return (
        "OEC^(T) gain over FrozenUpstream (the paper's Table 2)",
        ["method"] + [f"β={b:g}, γ={g:g}" for b, g in cols],
        body,
        f"Points of OEC^(T) above FrozenUpstream's, mean over {test_streams} test streams (one seed each); "
        "picks from the search at the normal setting (β=0.5, γ=0.8).",
    )


def is_preset_folder(folder: Path) -> bool:
    """A ``--preset cmr`` output folder (picks.json beside test/), which ``ocrr report`` reads."""
    return (folder / "picks.json").is_file() and (folder / "test").is_dir()


def preset_tables(folder: Path) -> list[tuple[str, list, list, str]]:
    """The preset's own tables for ``ocrr report``: the picks and, when it ran, Table 2."""
    picks = json.loads((folder / "picks.json").read_text(encoding="utf-8"))
    tables = [picks_table(picks, pd.read_csv(folder / "search.csv"))]
    if (folder / "table2.csv").is_file():
        table2 = pd.read_csv(folder / "table2.csv")
        if len(table2):
            tables.append(table2_table(table2, int(table2["streams"].max())))
    return tables


def _write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


# `ocrr report OUT` on the preset's folder: its test stage, then the picks and Table 2
register_folder_section(
    FolderSection(
        "The preset's search and Table 2", "preset", is_preset_folder, lambda folder: folder / "test", preset_tables
    )
)
