"""``ocrr sweep``: a grid of datasets x policies x seeds x systems, resumable; the staged CMR presets."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from ocrr.cli.common import add_command, console, print_hint, print_warning
from ocrr.cli.hints import data_hints, executor_hints, grid_hints
from ocrr.cli.licence import licence_banners
from ocrr.cli.options import add_heldout_options, heldout_shortcuts, parse_data_options
from ocrr.cli.paths import output_folder, output_path
from ocrr.cli.progress import SweepProgress
from ocrr.cli.track import add_track_option, log_sweep_folder, sweep_params
from ocrr.data import check_dataset
from ocrr.data.locate import checked_cache_root
from ocrr.engine.fork_server import start_fork_server
from ocrr.engine.sweep import PRESETS, finished_tasks, load_config, resolve_grid, run_sweep
from ocrr.engine.sweep.executors import make_executor
from ocrr.engine.tracking import open_tracker, parent_run
from ocrr.errors import OcrrError
from ocrr.report import build_report
from ocrr.studies import encoder_swap
from ocrr.studies.cmr_preset import STAGED_PRESETS, plan_from_options, run_cmr_preset

# What each preset is, for --help; a preset missing here is still listed, by its name.
PRESET_HELP = {
    "main": "OCRR paper 5.1: 162 runs, + 18 of the consolidating memory",
    "storage": "OCRR paper 4.4",
    "ablation": "OCRR paper 5.6",
    "river": "published river beside two fair variants",
    "consolidating": "the consolidating memory, MbPA++ and its ablations",
    "ocl": "EvalOCL, Banking77",
    "encoders": "the main systems under each packaged encoder",
    "language_shift": "Leyzer en->es and en->pl, MiniLM vs USE multilingual",
    "smoke": "seconds, synthetic",
    "cmr": "CMR paper: search on validation streams, then the test table",
    "cmr_table2": "and its Table 2",
}


def preset_names() -> list[str]:
    """Every preset ``--preset`` takes: the grid presets, then the staged ones."""
    return [*PRESETS, *STAGED_PRESETS]


def _preset_help() -> str:
    return " | ".join(f"{name} ({PRESET_HELP[name]})" if name in PRESET_HELP else name for name in preset_names())


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "sweep",
        run,
        help="run a grid of datasets x policies x seeds x systems (resumable)",
        description="Run every (dataset, encoder, policy, seed, system) of a grid as one task. "
        "Finished tasks are skipped on re-run, so an interrupted sweep resumes. "
        "Settings: --preset, then --config FILE (TOML/JSON), then these options.",
    )
    p.add_argument("--preset", default=None, help=_preset_help())
    p.add_argument("--config", type=Path, default=None, help="a .toml or .json file of grid settings")
    p.add_argument("--datasets", nargs="+", default=None, help="datasets (as for ocrr run --dataset)")
    p.add_argument(
        "--policies",
        nargs="+",
        default=None,
        help="policies (as for ocrr run --policy), e.g. oracle all random50 random10 random:0.25",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds, e.g. 0 1 2")
    p.add_argument(
        "--systems",
        nargs="+",
        default=None,
        help="system specs (name:key=value overrides); '+name' adds to the preset's systems, "
        "e.g. --systems +lora_deberta",
    )
    p.add_argument("--encoders", nargs="+", default=None, help="encoder specs (default minilm)")
    p.add_argument(
        "--protocol",
        "--protocols",
        dest="protocols",
        nargs="+",
        default=None,
        help="protocol specs, name:key=value (default heldout; 'ocrr protocols' lists them)",
    )
    add_heldout_options(p)
    p.add_argument("--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache)")
    p.add_argument(
        "--data-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="loader option for every dataset of the grid (per dataset: use --config)",
    )
    p.add_argument("--no-oos", action="store_true", help="CLINC150: drop the out-of-scope class")
    p.add_argument("--executor", default=None, help="local (processes, default) | ray | serial")
    p.add_argument("--jobs", type=int, default=None, help="parallel workers (default: one per core)")
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster address (auto, local, host:port or ray://host:port); default: start one",
    )
    p.add_argument("--out", type=output_path, default=None, help="sweep folder (default results/sweep-<preset>)")
    p.add_argument("--dry-run", action="store_true", help="list the grid and what is already done; run nothing")
    p.add_argument("--report", action="store_true", help="also write the report (as ocrr report OUT)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_track_option(p)


def run(args) -> int:
    checked_cache_root()  # runs cache their embeddings: a cache folder that is a file stops here
    config = load_config(args.config) if args.config else {}
    preset = args.preset or config.get("preset")
    if preset in STAGED_PRESETS:
        return _run_staged_preset(args, preset, config)
    if not (preset or config or args.datasets or args.systems):
        raise OcrrError(
            f"ocrr sweep needs a grid: --preset {'|'.join(preset_names())}, --config FILE, "
            "or --datasets/--systems (see ocrr sweep --help)."
        )
    options = parse_data_options(args.data_option, example="dim=32")
    grid = resolve_grid(
        preset,
        config,
        datasets=args.datasets,
        policies=args.policies,
        seeds=args.seeds,
        systems=args.systems,
        encoders=args.encoders,
        protocols=args.protocols,
        data_dir=args.data_dir,
        data_options=options or None,
        oos=False if args.no_oos else None,
        **heldout_shortcuts(args),
    )
    out = args.out or Path(config.get("out") or Path("results") / f"sweep-{preset or 'custom'}")
    output_folder(Path(out), "--out" if args.out else "the sweep folder")
    executor = args.executor or config.get("executor", "local")
    if executor == "local" and not args.dry_run:  # the workers' imports load in the fork server meanwhile
        start_fork_server()
    jobs = args.jobs if args.jobs is not None else config.get("jobs")
    address = args.address or config.get("address")
    screen = console()
    grid.protocol_objects()  # a bad protocol option fails before a hint speaks of it
    hints = grid_hints(grid, policy_flag="--policies", shortcuts=heldout_shortcuts(args), seeds=args.seeds)
    hints += data_hints(grid.datasets, args.no_oos)
    for hint in hints + executor_hints(executor, jobs, address, args.report, args.dry_run):
        print_hint(hint)
    licence_banners(screen, grid.datasets)
    make_executor(executor, jobs, address)  # a bad executor, --jobs or --address stops here, as in the dry run
    for dataset in grid.datasets:
        check_dataset(dataset, data_dir=grid.data_dir, **grid.options_for(dataset))
    if args.dry_run:  # what the run would refuse first, it refuses too
        tasks = grid.tasks()
        done, damaged = finished_tasks(Path(out), tasks)
        for path, reason in damaged.items():
            print_warning(f"{path} cannot be read ({reason}): the run would remove its task's files and run it again.")
        n_done = sum(t.task_id in done for t in tasks)
        screen.print(
            f"{len(tasks)} runs = {len(grid.datasets)} datasets x {len(grid.encoders)} encoders x "
            f"{len(set(t.protocol for t in tasks))} protocols x "
            f"{len(grid.policies)} policies x {len(set(t.system for t in tasks))} systems x "
            f"{len(grid.seeds)} seeds; {n_done} already done in {out}/, {len(tasks) - n_done} to run."
        )
        return 0
    progress = SweepProgress(screen, quiet=args.quiet)
    tracking = parent_run(open_tracker(args.track), Path(out).name, sweep_params(grid, preset, Path(out)))
    with tracking as tracker:  # a missing MLflow or a store out of reach stops here, before any work
        result = run_sweep(grid, out, executor=executor, jobs=jobs, address=address, progress=progress, tracker=tracker)
        report = build_report(out).out if args.report and len(result.results) else None
        if tracker is not None and len(result.results):
            log_sweep_folder(tracker, Path(out), report)
    n_runs = result.results[["task_id"]].drop_duplicates().shape[0] if len(result.results) else 0
    screen.print(
        f"{len(result.tasks)} runs in the grid: {len(result.skipped)} already done, {len(result.ran)} ran, "
        f"{len(result.failed)} failed, in {result.seconds:.1f} s ({executor}). {out}/results.parquet "
        f"and results.csv hold {n_runs} runs, {len(result.results)} rows.",
        highlight=False,
    )
    if preset == encoder_swap.PRESET and not result.failed and len(result.results):
        _, files = encoder_swap.finish_study(
            grid, out, result.results, say=lambda text: screen.print(text, highlight=False)
        )
        screen.print(f"wrote {', '.join(p.name for p in files)} to {out}/", highlight=False)
    for task, message in result.failed[:10]:
        screen.print(
            f"[red]failed[/] {escape(f'{task.dataset} · {task.policy} · seed {task.seed} · {task.system}')}: "
            f"{escape(message)}",
            highlight=False,
            soft_wrap=True,  # a task's error stays whole
        )
    if result.failed:
        screen.print("Fix the cause and run the same command again: finished runs are kept, failed ones retried.")
    if report is not None:
        screen.print(f"report: {report / 'report.html'}")
    elif len(result.results):
        screen.print(f"Tables, figures and report.html: ocrr report {out}", highlight=False)
    return 1 if result.failed else 0


def _run_staged_preset(args, preset: str, config: dict) -> int:
    """--preset cmr | cmr_table2: search on validation streams, then test (ocrr.studies.cmr_preset)."""
    _refuse_what_the_staged_preset_sets(args, preset, config)
    plan = plan_from_options(
        preset,
        args.datasets,
        args.protocols,
        args.systems,
        parse_data_options(args.data_option, example="dim=32"),
        args.data_dir,
    )
    out = args.out or Path("results") / f"sweep-{preset}"
    screen = console()
    if args.dry_run:
        screen.print(
            f"--preset {preset}: search on {plan.val_streams} validation streams of {plan.dataset} "
            f"({sum(len(s.candidates({m.method: {} for m in plan.spaces})) for s in plan.spaces)} "
            f"candidates), then test on {plan.test_streams} streams x {plan.seeds_per_stream} seeds"
            f"{', then Table 2' if plan.table2 else ''}, into {out}/.",
            highlight=False,
        )
        return 0
    result = run_cmr_preset(
        plan,
        out,
        executor=args.executor or "local",
        jobs=args.jobs,
        address=args.address,
        progress_factory=lambda: SweepProgress(screen, quiet=args.quiet),
        say=lambda text: screen.print(text, highlight=False),
    )
    for method, overrides in result["picks"].items():
        screen.print(
            f"  picked {method}: {', '.join(f'{k}={v}' for k, v in overrides.items()) or '(defaults)'}", highlight=False
        )
    screen.print(
        f"wrote {', '.join(p.name for p in result['files'])} to {out}/; tables in {out}/cmr.md. "
        f"Curves and report.html: ocrr report {out}/test",
        highlight=False,
    )
    if args.report:
        screen.print(f"report: {build_report(out / 'test').html}")
    return 0


def _refuse_what_the_staged_preset_sets(args, preset: str, config: dict) -> None:
    """--preset cmr picks its own policy, seeds, encoder and stages: an option it would ignore is an error."""
    given = {
        "--policies": args.policies,
        "--seeds": args.seeds,
        "--encoders": args.encoders,
        "--heldout": args.heldout,
        "--eval-cap": args.eval_cap,
        "--every": args.every,
        "--no-oos": args.no_oos or None,
        "--track": args.track,  # its stages are sweeps of their own: not tracked yet
    }
    ignored = [flag for flag, value in given.items() if value is not None]
    ignored += [f"{key} (in {args.config})" for key in config if key != "preset"]
    if ignored:
        raise OcrrError(
            f"--preset {preset} sets its policy (oracle), encoder (minilm) and seeds (validation, then test "
            "streams) itself and takes its other settings from the command line only, so "
            f"{', '.join(ignored)} would be ignored. Drop "
            f"{'it' if len(ignored) == 1 else 'them'}, or run your own grid without the preset, e.g. "
            "ocrr sweep --datasets clinc150 --protocol cmr --seeds 0 1 2 --systems cft er substrate."
        )
