"""The ``ocrr`` command: a thin layer over ocrr.engine.experiment, ocrr.encoders and the registry."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ocrr.errors import OcrrError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except OcrrError as err:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {err}", highlight=False)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ocrr", description="Online Correction Recovery benchmark.")
    sub = p.add_subparsers(dest="command")

    run = sub.add_parser("run", help="run systems through a protocol (default: held-out classes); write tables")
    _data_options(run)
    run.add_argument(
        "--protocol",
        default="heldout",
        help="protocol spec, name:key=value (default heldout; 'ocrr protocols' lists them)",
    )
    run.add_argument(
        "--policy",
        default="oracle",
        help="oracle | all | random50 | random10 | random:<p> (default oracle; all reveals every label, right or wrong)",
    )
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    run.add_argument(
        "--systems",
        nargs="+",
        default=None,
        help="system specs, space- or comma-separated; 'all' for every registered system; "
        "override hyperparameters as name:key=value (default: substrate static_knn "
        "static_linear online_linear)",
    )
    run.add_argument("--heldout", type=int, default=None, help="heldout protocol: held-out classes (default 10)")
    run.add_argument(
        "--eval-cap", type=int, default=None, help="heldout protocol: cap on each eval set, 0 for none (default 400)"
    )
    run.add_argument(
        "--every", type=int, default=None, help="heldout protocol: checkpoint every N stream items (default 50)"
    )
    run.add_argument("--out", type=Path, default=None, help="output folder (default results/<dataset>-<policy>)")
    run.add_argument(
        "--fallback-demo",
        action="store_true",
        help="if the dataset cannot be found or downloaded, run on the bundled demo set instead",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_cmd_run)

    embed = sub.add_parser("embed", help="encode a dataset and fill the embedding cache")
    _data_options(embed)
    embed.set_defaults(handler=_cmd_embed)

    systems = sub.add_parser("systems", help="list registered systems and their hyperparameters")
    systems.set_defaults(handler=_cmd_systems)
    protocols = sub.add_parser("protocols", help="list registered protocols and their options")
    protocols.set_defaults(handler=_cmd_protocols)
    _sweep_parser(sub)
    _report_parser(sub)
    _scale_parser(sub)
    _calibrate_parser(sub)
    from ocrr.cli.ledger import add_commands
    from ocrr.cli.serve import add_serve

    add_commands(sub)
    add_serve(sub)
    return p


def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dataset",
        default="banking77",
        help="banking77 | clinc150 | demo | synthetic | csv:<train>[,<test>] | jsonl:<train>[,<test>]",
    )
    p.add_argument(
        "--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache, download)"
    )
    p.add_argument("--no-oos", action="store_true", help="CLINC150: drop the out-of-scope class")
    p.add_argument("--text-col", default=None, help="your CSV/JSONL: the text column (default 'text')")
    p.add_argument("--label-col", default=None, help="your CSV/JSONL: the label column (default 'label')")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="your CSV/JSONL without a test file: fraction held for testing (default 0.2)",
    )
    p.add_argument(
        "--data-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other loader option, e.g. synthetic's n_classes=50 dim=384 sigma=0.02",
    )
    p.add_argument(
        "--encoder",
        default=None,
        help="minilm (default, offline) | st:<sentence-transformers id> | precomputed:<file.npy|.npz>",
    )


def _experiment(args, **extra):
    from ocrr.engine.experiment import MAIN_SYSTEMS, Experiment
    from ocrr.specs import parse_value

    options = {}
    for item in args.data_option:
        if "=" not in item:
            raise OcrrError(f"--data-option {item!r} is not KEY=VALUE, e.g. --data-option n_classes=50.")
        key, value = item.split("=", 1)
        options[key.strip()] = parse_value(value.strip())
    for key in ("text_col", "label_col", "test_fraction"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    from ocrr.engine.sweep.grid import EMBEDDING_ONLY

    if args.encoder is not None and args.dataset in EMBEDDING_ONLY:
        raise OcrrError(
            f"{args.dataset} carries its own vectors, so --encoder {args.encoder} would be ignored. "
            "Drop --encoder, or use a dataset with texts (e.g. csv:FILE or jsonl:FILE)."
        )
    return Experiment(
        dataset=args.dataset,
        encoder=args.encoder or "minilm",
        data_dir=args.data_dir,
        oos=not args.no_oos,
        data_options=options,
        systems=list(getattr(args, "systems", None) or MAIN_SYSTEMS),
        **extra,
    )


def _console():
    """A console wide enough for the results table even when output is piped."""
    from rich.console import Console

    return Console(width=max(Console().width, 120))


def _cmd_run(args) -> int:
    from ocrr.cli.progress import RunProgress
    from ocrr.engine.experiment import experiment_grid, load_experiment_dataset, run_experiment, write_outputs

    console = _console()
    exp = _experiment(
        args,
        policy=args.policy,
        seeds=args.seeds,
        protocol=args.protocol,
        n_heldout=args.heldout,
        eval_cap=args.eval_cap,
        every=args.every,
    )
    n_runs = len(experiment_grid(exp).tasks())  # bad systems, options and protocols fail now, not after encoding
    try:
        dataset = load_experiment_dataset(exp)
    except OcrrError as err:
        if not args.fallback_demo or exp.dataset == "demo":
            raise
        _demo_banner(console, exp.dataset, err)
        exp.dataset = "demo"
        dataset = load_experiment_dataset(exp)
    out = args.out or Path("results") / f"{dataset.name}-{exp.policy.replace(':', '')}"
    started = time.perf_counter()
    with RunProgress(console, args.quiet) as progress:
        result = run_experiment(
            exp, dataset, embed_progress=progress.embedding, on_checkpoint=progress.checkpoints(n_runs)
        )
    paths = write_outputs(result, out)
    _print_table(console, result)
    console.print(
        f"{len(result.per_checkpoint)} checkpoints in {time.perf_counter() - started:.1f} s; "
        f"wrote {', '.join(p.name for p in paths.values())} to {out}/"
    )
    return 0


def _demo_banner(console, name: str, err: OcrrError) -> None:
    from rich.panel import Panel

    console.print(
        Panel(
            f"[bold]{name} is not available here, so this run uses the small bundled 'demo' help-desk dataset.[/]\n"
            f"Its numbers are NOT the paper's benchmark.\n\nWhy: {err}",  # the error names the fix
            title="[bold red]RUNNING ON DEMO DATA[/]",
            border_style="red",
        )
    )


def _print_table(console, result) -> None:
    from rich.table import Table

    exp = result.experiment
    table = Table(
        title=f"{result.dataset.name} · {exp.policy} · {result.encoder_id} · seeds {' '.join(map(str, exp.seeds))}"
    )
    header, rows, _ = result.protocol.table(result.summary)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _cmd_embed(args) -> int:
    from rich.console import Console

    from ocrr.cli.progress import RunProgress
    from ocrr.encoders import embed_dataset
    from ocrr.engine.experiment import load_experiment_dataset

    console = Console()
    exp = _experiment(args)
    dataset = load_experiment_dataset(exp)
    with RunProgress(console, quiet=False) as progress:
        emb = embed_dataset(dataset, exp.encoder, progress=progress.embedding)
    console.print(
        f"{dataset.name}: {len(emb.train)} train + {len(emb.test)} test vectors of dimension "
        f"{emb.train.shape[1]} from {emb.encoder_id} ({emb.source}); sha256 {emb.sha256[:16]}…"
    )
    return 0


def _cmd_systems(args) -> int:
    from rich.table import Table

    from ocrr.systems import REGISTRY
    from ocrr.systems.registry import _ensure_builtins

    _ensure_builtins()
    aliases, variants = _system_aliases(REGISTRY)
    table = Table(title="registered systems (override as name:key=value)")
    table.add_column("name", no_wrap=True)
    table.add_column("family", no_wrap=True)
    table.add_column("hyperparameters", overflow="fold")
    table.add_column("what it is")
    for name, entry in REGISTRY.items():
        if name in aliases:
            continue  # shown on its base's row
        hyper = _system_hyperparameters(name, entry, variants.get(name))
        summary = entry.summary
        group = [a for a, (base, _) in aliases.items() if base == name]
        if group:
            key = aliases[group[0]][1]
            tails = ", ".join(a[len(name) :] for a in group[1:])
            summary += f". Aliases: {group[0]}{', ' + tails if tails else ''} (= {name}:{key}=N)"
        table.add_row(name, entry.family, hyper, summary)
    _console().print(table)
    return 0


def _cmd_protocols(args) -> int:
    from rich.table import Table

    from ocrr.protocols import PROTOCOLS

    table = Table(title="registered protocols (options as name:key=value, e.g. --protocol heldout:every=25)")
    table.add_column("name", no_wrap=True)
    table.add_column("options (default)", overflow="fold")
    table.add_column("metrics")
    table.add_column("what it is")
    for name, cls in PROTOCOLS.items():
        options = ", ".join(f"{k}={o.default}" + (f" ({o.help})" if o.help else "") for k, o in cls.options.items())
        table.add_row(name, options or "(none)", ", ".join(cls.metrics), cls.summary_text)
    _console().print(table)
    return 0


def _system_aliases(registry) -> tuple[dict, dict]:
    """Spot names that only bake in one hyperparameter of another entry.

    Returns ({alias: (base, key)} for names like ``base_<value>`` whose single baked-in
    override is ``key=<value>``, {variant: base} for other entries that share a factory
    with an entry that bakes in nothing (their rows list only what they change).
    """
    plain = {e.factory: n for n, e in registry.items() if not e.defaults}
    aliases, variants = {}, {}
    for name, entry in registry.items():
        base = plain.get(entry.factory)
        if not entry.defaults or base is None or base == name:
            continue
        (key, value), *more = entry.defaults.items()
        if not more and name == f"{base}_{value}":
            aliases[name] = (base, key)
        else:
            variants[name] = base
    return aliases, variants


def _system_hyperparameters(name: str, entry, base: str | None) -> str:
    """'k=v, ...' of a default-built system, or why it cannot be built here."""
    from ocrr.systems import make_system

    try:
        system = make_system(name)
        hyper = system.hyperparameters() if hasattr(system, "hyperparameters") else {}
    except Exception as err:  # e.g. an optional extra (peft, ray) that is not installed
        return f"[yellow]unavailable here: {type(err).__name__}: {err}[/]"
    if base is not None:  # a variant: show what it changes, the rest is the base's
        return ", ".join(f"{k}={hyper.get(k, v)}" for k, v in entry.defaults.items()) + f"; rest as {base}"
    return ", ".join(f"{k}={v}" for k, v in hyper.items()) or "(none)"


# --- ocrr sweep / ocrr report -------------------------------------------------------------


def _sweep_parser(sub) -> None:
    sw = sub.add_parser(
        "sweep",
        help="run a grid of datasets x policies x seeds x systems (resumable)",
        description="Run every (dataset, encoder, policy, seed, system) of a grid as one task. "
        "Finished tasks are skipped on re-run, so an interrupted sweep resumes. "
        "Settings: --preset, then --config FILE (TOML/JSON), then these options.",
    )
    sw.add_argument(
        "--preset",
        default=None,
        help="main (paper 5.1: 162 runs, + 18 of consolidating) | storage (4.4) | ablation (5.6) | "
        "river (published river beside two fair variants) | consolidating (it, MbPA++ and its "
        "ablations) | ocl (EvalOCL, Banking77) | smoke (seconds, synthetic) | cmr (CMR paper: search "
        "on validation streams, then the test table) | cmr_table2 (and its Table 2)",
    )
    sw.add_argument("--config", type=Path, default=None, help="a .toml or .json file of grid settings")
    sw.add_argument("--datasets", nargs="+", default=None, help="datasets (as for ocrr run --dataset)")
    sw.add_argument("--policies", nargs="+", default=None, help="oracle random50 random10 random:<p> ...")
    sw.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds, e.g. 0 1 2")
    sw.add_argument(
        "--systems",
        nargs="+",
        default=None,
        help="system specs (name:key=value overrides); '+name' adds to the preset's systems, "
        "e.g. --systems +lora_deberta",
    )
    sw.add_argument("--encoders", nargs="+", default=None, help="encoder specs (default minilm)")
    sw.add_argument(
        "--protocol",
        "--protocols",
        dest="protocols",
        nargs="+",
        default=None,
        help="protocol specs, name:key=value (default heldout; 'ocrr protocols' lists them)",
    )
    sw.add_argument("--heldout", type=int, default=None, help="heldout protocol: held-out classes (default 10)")
    sw.add_argument(
        "--eval-cap", type=int, default=None, help="heldout protocol: cap on each eval set, 0 for none (default 400)"
    )
    sw.add_argument(
        "--every", type=int, default=None, help="heldout protocol: checkpoint every N stream items (default 50)"
    )
    sw.add_argument("--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache)")
    sw.add_argument(
        "--data-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="loader option for every dataset of the grid (per dataset: use --config)",
    )
    sw.add_argument("--no-oos", action="store_true", help="CLINC150: drop the out-of-scope class")
    sw.add_argument("--executor", default=None, help="local (processes, default) | ray | serial")
    sw.add_argument("--jobs", type=int, default=None, help="parallel workers (default: one per core)")
    sw.add_argument("--address", default=None, help="Ray cluster address ('auto' or host:port); default: start one")
    sw.add_argument("--out", type=Path, default=None, help="sweep folder (default results/sweep-<preset>)")
    sw.add_argument("--dry-run", action="store_true", help="list the grid and what is already done; run nothing")
    sw.add_argument("--report", action="store_true", help="also write the report (as ocrr report OUT)")
    sw.add_argument("--quiet", action="store_true", help="no progress display")
    sw.set_defaults(handler=_cmd_sweep)


def _report_parser(sub) -> None:
    rp = sub.add_parser("report", help="tables, figures and report.html from a sweep or run folder")
    rp.add_argument("results", type=Path, help="a sweep folder, an ocrr run folder, or a results .parquet/.csv")
    rp.add_argument("--out", type=Path, default=None, help="output folder (default RESULTS/report)")
    rp.set_defaults(handler=_cmd_report)


def _cmd_sweep(args) -> int:
    from rich.markup import escape

    from ocrr.cli.progress import SweepProgress
    from ocrr.engine.sweep import finished_ids, load_config, resolve_grid, run_sweep
    from ocrr.studies.cmr_preset import STAGED_PRESETS

    config = load_config(args.config) if args.config else {}
    preset = args.preset or config.get("preset")
    if preset in STAGED_PRESETS:
        return _cmd_staged_preset(args, preset)
    if not (preset or config or args.datasets or args.systems):
        raise OcrrError(
            "ocrr sweep needs a grid: --preset main|storage|ablation|smoke, --config FILE, "
            "or --datasets/--systems (see ocrr sweep --help)."
        )
    options = _parse_data_options(args.data_option)
    grid = resolve_grid(
        preset,
        config,
        datasets=args.datasets,
        policies=args.policies,
        seeds=args.seeds,
        systems=args.systems,
        encoders=args.encoders,
        protocols=args.protocols,
        n_heldout=args.heldout,
        eval_cap=args.eval_cap,
        every=args.every,
        data_dir=args.data_dir,
        data_options=options or None,
        oos=False if args.no_oos else None,
    )
    out = args.out or Path(config.get("out") or Path("results") / f"sweep-{preset or 'custom'}")
    executor = args.executor or config.get("executor", "local")
    jobs = args.jobs if args.jobs is not None else config.get("jobs")
    address = args.address or config.get("address")
    console = _console()
    if args.dry_run:
        tasks = grid.tasks()
        done = finished_ids(Path(out)) if Path(out).exists() else set()
        n_done = sum(t.task_id in done for t in tasks)
        console.print(
            f"{len(tasks)} runs = {len(grid.datasets)} datasets x {len(grid.encoders)} encoders x "
            f"{len(set(t.protocol for t in tasks))} protocols x "
            f"{len(grid.policies)} policies x {len(set(t.system for t in tasks))} systems x "
            f"{len(grid.seeds)} seeds; {n_done} already done in {out}/, {len(tasks) - n_done} to run."
        )
        return 0
    progress = SweepProgress(console, quiet=args.quiet)
    result = run_sweep(grid, out, executor=executor, jobs=jobs, address=address, progress=progress)
    n_runs = result.results[["task_id"]].drop_duplicates().shape[0] if len(result.results) else 0
    console.print(
        f"{len(result.tasks)} runs in the grid: {len(result.skipped)} already done, {len(result.ran)} ran, "
        f"{len(result.failed)} failed, in {result.seconds:.1f} s ({executor}). {out}/results.parquet "
        f"and results.csv hold {n_runs} runs, {len(result.results)} rows.",
        highlight=False,
    )
    for task, message in result.failed[:10]:
        console.print(
            f"[red]failed[/] {escape(f'{task.dataset} · {task.policy} · seed {task.seed} · {task.system}')}: "
            f"{escape(message)}",
            highlight=False,
        )
    if result.failed:
        console.print("Fix the cause and run the same command again: finished runs are kept, failed ones retried.")
    if args.report and len(result.results):
        from ocrr.report import build_report

        report = build_report(out)
        console.print(f"report: {report.html}")
    elif len(result.results):
        console.print(f"Tables, figures and report.html: ocrr report {out}", highlight=False)
    return 1 if result.failed else 0


def _parse_data_options(items: list[str]) -> dict:
    from ocrr.specs import parse_value

    options = {}
    for item in items:
        if "=" not in item:
            raise OcrrError(f"--data-option {item!r} is not KEY=VALUE, e.g. --data-option dim=32.")
        key, value = item.split("=", 1)
        options[key.strip()] = parse_value(value.strip())
    return options


def _cmd_staged_preset(args, preset: str) -> int:
    """--preset cmr | cmr_table2: search on validation streams, then test (ocrr.studies.cmr_preset)."""
    from ocrr.cli.progress import SweepProgress
    from ocrr.studies.cmr_preset import plan_from_options, run_cmr_preset

    plan = plan_from_options(
        preset, args.datasets, args.protocols, args.systems, _parse_data_options(args.data_option), args.data_dir
    )
    out = args.out or Path("results") / f"sweep-{preset}"
    console = _console()
    if args.dry_run:
        console.print(
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
        progress_factory=lambda: SweepProgress(console, quiet=args.quiet),
        say=lambda text: console.print(text, highlight=False),
    )
    for method, overrides in result["picks"].items():
        console.print(
            f"  picked {method}: {', '.join(f'{k}={v}' for k, v in overrides.items()) or '(defaults)'}", highlight=False
        )
    console.print(
        f"wrote {', '.join(p.name for p in result['files'])} to {out}/; tables in {out}/cmr.md. "
        f"Curves and report.html: ocrr report {out}/test",
        highlight=False,
    )
    if args.report:
        from ocrr.report import build_report

        console.print(f"report: {build_report(out / 'test').html}")
    return 0


def _cmd_report(args) -> int:
    from rich.markup import escape

    from ocrr.report import build_report

    report = build_report(args.results, args.out)
    console = _console()
    for title in report.tables:
        console.print(f"  {escape(title)}", highlight=False)  # "[stream=0]" is text, not markup
    console.print(
        f"{len(report.tables)} tables and {len(report.figures)} figure files in {report.out}/; open {report.html}",
        highlight=False,
    )
    return 0


# --- ocrr scale ----------------------------------------------------------------------------
def _scale_parser(sub) -> None:
    from ocrr.cli.scale import add_scale_command  # the scale study's options live with it

    add_scale_command(sub)


def _calibrate_parser(sub) -> None:
    cs = sub.add_parser(
        "calibrate-shift",
        help="choose the near-future shift S* with the blind classifier (EvalOCL)",
        description="On validation streams of the ocl protocol (labels only, no encoder): the "
        "blind classifier's near-future accuracy A(k, S) for k and S on powers of two, "
        "A*(S) = max over k, and S* = the smallest S with A*(S) <= max(majority, 1/C) "
        "+ 0.01. Prints the curve; writes blind_curve.csv, blind_shift.csv and a figure. "
        "Then run with --protocol ocl:...:shift=S*.",
    )
    cs.add_argument("--dataset", default="banking77", help="dataset (as for ocrr run --dataset)")
    cs.add_argument("--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache)")
    cs.add_argument("--protocol", default="ocl", help="ocl spec, e.g. ocl:stay=0.9:batch=1 (split=val unless given)")
    cs.add_argument("--seeds", type=int, nargs="+", default=[0], help="validation streams, averaged (default 0)")
    cs.add_argument("--k-max", type=int, default=256, help="largest window k (default 256)")
    cs.add_argument("--s-max", type=int, default=None, help="largest shift S (default half the stream)")
    cs.add_argument("--out", type=Path, default=None, help="where to write the curve and figure (default: print only)")
    cs.set_defaults(handler=_cmd_calibrate_shift)


def _cmd_calibrate_shift(args) -> int:
    from ocrr.data import load_dataset
    from ocrr.protocols import PROTOCOLS, make_protocol
    from ocrr.specs import parse_spec
    from ocrr.studies.calibrate_shift import calibrate_protocol, write_calibration

    if args.k_max < 1 or (args.s_max is not None and args.s_max < 0):
        raise OcrrError("calibrate-shift needs --k-max >= 1 and --s-max >= 0.")
    name, options = parse_spec(args.protocol, "protocol", "ocl:stay=0.9")
    validation = "split" not in options and "split" in getattr(PROTOCOLS.get(name), "options", {})
    protocol = make_protocol(args.protocol, **({"split": "val"} if validation else {}))
    cal = calibrate_protocol(
        load_dataset(args.dataset, data_dir=args.data_dir), protocol, args.seeds, args.k_max, args.s_max
    )
    print(
        f"{args.dataset}, {protocol.spec()}, streams {' '.join(map(str, args.seeds))}: "
        f"chance max(majority, 1/C) = {cal.chance:.4f}"
    )
    print(f"{'S':>6} {'A*(S)':>8} {'best k':>6}")
    for _, r in cal.best.iterrows():
        mark = "  <- S*" if r["shift"] == cal.shift else ""
        print(f"{int(r['shift']):>6} {r['a_star']:>8.4f} {int(r['best_k']):>6}{mark}")
    print(
        f"S* = {cal.shift}"
        if cal.shift is not None
        else f"no S up to {int(cal.best['shift'].max())} brings A*(S) to chance + {cal.tolerance}; raise --s-max"
    )
    if args.out:
        paths = write_calibration(cal, args.out, f"blind classifier: {args.dataset}, {args.protocol}")
        print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
