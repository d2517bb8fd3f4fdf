"""``ocrr run``: systems through a protocol on one dataset and policy; tables and a results table on screen."""

from __future__ import annotations

import time
from pathlib import Path

from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ocrr.cli.common import add_command, console, print_hint
from ocrr.cli.licence import licence_banners
from ocrr.cli.options import add_data_options, add_heldout_options, experiment_from_args, heldout_shortcuts
from ocrr.cli.paths import output_folder, output_path
from ocrr.cli.track import add_track_option, experiment_params, log_run_folder
from ocrr.data import check_dataset_spec
from ocrr.data.locate import checked_cache_root
from ocrr.engine.fork_server import available_cores, start_fork_server
from ocrr.engine.seeds import MAX_SEED, SEED_RANGE
from ocrr.engine.tracking import open_tracker, parent_run
from ocrr.errors import OcrrError
from ocrr.specs import spec_name


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "run",
        run,
        help="run systems through a protocol (default: held-out classes); write tables",
        description="Run systems through a protocol (default: held-out classes) on one dataset, one "
        "correction policy and each seed; print the results table and write the tables to --out. "
        "Without the real datasets: --dataset demo (bundled), or --fallback-demo.",
    )
    add_data_options(p)
    p.add_argument(
        "--protocol",
        default="heldout",
        help="protocol spec, name:key=value (default heldout; 'ocrr protocols' lists them)",
    )
    p.add_argument(
        "--policy",
        default="oracle",
        help="oracle | all | random50 | random10 | random:<p> (default oracle; all reveals every label, "
        "right or wrong), then feedback options if any, e.g. oracle:noise=0.1:delay=50",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    p.add_argument(
        "--systems",
        nargs="+",
        default=None,
        help="system specs, space- or comma-separated; 'all' for every registered system; "
        "override hyperparameters as name:key=value (default: substrate static_knn "
        "static_linear online_linear)",
    )
    add_heldout_options(p)
    p.add_argument("--out", type=output_path, default=None, help="output folder (default results/<dataset>-<policy>)")
    p.add_argument(
        "--fallback-demo",
        action="store_true",
        help="if the dataset cannot be found or downloaded, run on the bundled demo set instead",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes for the runs (default: one per core; 1: every run in this process)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_track_option(p)


def run(args) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise OcrrError(f"--jobs must be at least 1 (1: every run in this process), got {args.jobs}")
    if any(not 0 <= seed <= MAX_SEED for seed in args.seeds):
        raise OcrrError(
            f"ocrr run --seeds must be whole numbers {SEED_RANGE}, e.g. --seeds 0 1 2; "
            f"got {' '.join(map(str, args.seeds))}."
        )
    output_folder(args.out or Path("results"))  # results are written at the end: check now
    checked_cache_root()  # the embeddings are cached before any run: a cache folder that is a file stops here
    jobs = args.jobs or available_cores()
    if jobs > 1:  # the workers' imports load in the fork server while this process loads its own
        start_fork_server()
    tracker = open_tracker(args.track)  # a missing MLflow or a store out of reach stops here, before any work
    # Imported only now, so that the fork server starts before them (pandas and the engine are slow to import).
    from ocrr.cli.progress import RunProgress
    from ocrr.engine.experiment import plan_experiment, run_experiment, write_outputs

    screen = console()
    _refuse_shortcuts_of_another_protocol(args)
    exp = experiment_from_args(
        args, policy=args.policy, seeds=args.seeds, protocol=args.protocol, **heldout_shortcuts(args)
    )
    plan = plan_experiment(exp)  # bad systems, options and protocols fail now, not after encoding
    for hint in _hints(args, plan.grid):
        print_hint(hint)
    licence_banners(screen, [exp.dataset])
    if args.fallback_demo:  # a misspelt name or option is an error, not data to fall back from
        check_dataset_spec(exp.dataset, **plan.grid.options_for(exp.dataset))
    try:
        dataset = plan.load_dataset()
    except OcrrError as err:
        if not args.fallback_demo or exp.dataset == "demo":
            raise
        _demo_banner(screen, exp.dataset, err)
        exp.dataset = "demo"
        plan = plan_experiment(exp)  # another dataset: other tasks
        dataset = plan.load_dataset()
    out = args.out or Path("results") / f"{dataset.name}-{exp.policy.replace(':', '')}"
    started = time.perf_counter()
    with parent_run(tracker, out.name, experiment_params(exp, plan.systems, out)) as tracker:
        with RunProgress(screen, args.quiet) as progress:
            result = run_experiment(
                plan,
                dataset,
                embed_progress=progress.embedding,
                on_checkpoint=progress.checkpoints(len(plan.tasks)),
                jobs=jobs,
                tracker=tracker,
            )
        paths = write_outputs(result, out)
        if tracker is not None:
            log_run_folder(tracker, paths, out)
    _print_table(screen, result)
    screen.print(
        f"{len(result.per_checkpoint)} checkpoints in {time.perf_counter() - started:.1f} s; "
        f"wrote {', '.join(p.name for p in paths.values())} to {out}/"
    )
    return 0


def _refuse_shortcuts_of_another_protocol(args) -> None:
    """--heldout, --eval-cap and --every set the heldout protocol's options: with another
    protocol they would change nothing (the grid refuses too, but in the words of a sweep)."""
    from ocrr.protocols import PROTOCOLS  # loaded with the engine by now

    shortcuts = {"--heldout": args.heldout, "--eval-cap": args.eval_cap, "--every": args.every}
    given = [flag for flag, value in shortcuts.items() if value is not None]
    name = spec_name(args.protocol)
    if given and name in PROTOCOLS and name != "heldout":  # (an unknown name: the grid names the close ones)
        one = len(given) == 1
        raise OcrrError(
            f"ocrr run {' '.join(given)}: {'it sets an option' if one else 'they set options'} of the heldout "
            f"protocol, which --protocol {args.protocol} does not run. Drop {'it' if one else 'them'}, or give "
            f"{name}'s own options as --protocol {name}:key=value ('ocrr protocols {name}' lists them)."
        )


def _hints(args, grid) -> list[str]:
    from ocrr.cli.hints import data_hints, fallback_demo_hint, grid_hints

    hints = grid_hints(grid, policy_flag="--policy", shortcuts=heldout_shortcuts(args), seeds=args.seeds)
    hints += data_hints([args.dataset], args.no_oos, args.test_fraction)
    return hints + (fallback_demo_hint(args.dataset) if args.fallback_demo else [])


def _demo_banner(screen, name: str, err: OcrrError) -> None:
    screen.print(
        Panel(
            f"[bold]{name} could not be loaded, so this run uses the small bundled 'demo' help-desk dataset.[/]\n"
            "Its numbers are NOT the paper's benchmark.",
            title="[bold red]RUNNING ON DEMO DATA[/]",
            border_style="red",
        )
    )
    # The error names the fix; outside the panel and unwrapped, so its URL or path stays whole for copying.
    screen.print(f"Why: {escape(str(err))}", highlight=False, soft_wrap=True)


def _print_table(screen, result) -> None:
    exp = result.experiment
    table = Table(
        title=f"{result.dataset.name} · {exp.policy} · {result.encoder_id} · seeds {' '.join(map(str, exp.seeds))}"
    )
    header, rows, _ = result.protocol.table(result.summary)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    screen.print(table)
