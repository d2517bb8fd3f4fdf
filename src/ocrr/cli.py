"""The ``ocrr`` command: a thin layer over ocrr.experiment, ocrr.encoders and the registry."""

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

    run = sub.add_parser("run", help="run systems through the held-out-class protocol; write tables")
    _data_options(run)
    run.add_argument("--policy", default="oracle", help="oracle | random50 | random10 | random:<p> (default oracle)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds (default 0 1 2)")
    run.add_argument("--systems", nargs="+", default=None,
                     help="system specs, space- or comma-separated; 'all' for every registered system; "
                          "override hyperparameters as name:key=value (default: substrate static_knn "
                          "static_linear online_linear)")
    run.add_argument("--heldout", type=int, default=10, help="number of held-out classes (default 10)")
    run.add_argument("--eval-cap", type=int, default=400, help="cap on each eval set, 0 for none (default 400)")
    run.add_argument("--every", type=int, default=50, help="checkpoint every N stream items (default 50)")
    run.add_argument("--out", type=Path, default=None, help="output folder (default results/<dataset>-<policy>)")
    run.add_argument("--fallback-demo", action="store_true",
                     help="if the dataset cannot be found or downloaded, run on the bundled demo set instead")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_cmd_run)

    embed = sub.add_parser("embed", help="encode a dataset and fill the embedding cache")
    _data_options(embed)
    embed.set_defaults(handler=_cmd_embed)

    systems = sub.add_parser("systems", help="list registered systems and their hyperparameters")
    systems.set_defaults(handler=_cmd_systems)
    return p


def _data_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default="banking77",
                   help="banking77 | clinc150 | demo | synthetic | csv:<train>[,<test>] | jsonl:<train>[,<test>]")
    p.add_argument("--data-dir", default=None, help="folder holding the dataset files (else $OCRR_DATA_DIR, cache, download)")
    p.add_argument("--no-oos", action="store_true", help="CLINC150: drop the out-of-scope class")
    p.add_argument("--text-col", default=None, help="your CSV/JSONL: the text column (default 'text')")
    p.add_argument("--label-col", default=None, help="your CSV/JSONL: the label column (default 'label')")
    p.add_argument("--test-fraction", type=float, default=None,
                   help="your CSV/JSONL without a test file: fraction held for testing (default 0.2)")
    p.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other loader option, e.g. synthetic's n_classes=50 dim=384 sigma=0.02")
    p.add_argument("--encoder", default="minilm",
                   help="minilm (default, offline) | st:<sentence-transformers id> | precomputed:<file.npy|.npz>")


def _experiment(args, **extra):
    from ocrr.experiment import MAIN_SYSTEMS, Experiment
    from ocrr.systems.registry import parse_value

    options = {}
    for item in args.data_option:
        if "=" not in item:
            raise OcrrError(f"--data-option {item!r} is not KEY=VALUE, e.g. --data-option n_classes=50.")
        key, value = item.split("=", 1)
        options[key.strip()] = parse_value(value.strip())
    for key in ("text_col", "label_col", "test_fraction"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    return Experiment(dataset=args.dataset, encoder=args.encoder, data_dir=args.data_dir, oos=not args.no_oos,
                      data_options=options, systems=list(getattr(args, "systems", None) or MAIN_SYSTEMS), **extra)


def _console():
    """A console wide enough for the results table even when output is piped."""
    from rich.console import Console

    return Console(width=max(Console().width, 120))


def _cmd_run(args) -> int:

    from ocrr.experiment import load_experiment_dataset, run_experiment, write_outputs
    from ocrr.results import TABLE_HEADER, table_rows
    from ocrr.runner import configure_threads, n_checkpoints
    from ocrr.systems import expand_systems, make_system

    console = _console()
    exp = _experiment(args, policy=args.policy, seeds=args.seeds, n_heldout=args.heldout,
                      eval_cap=args.eval_cap or None, every=args.every)
    for spec in expand_systems(exp.systems):  # unknown names fail now, not after encoding
        make_system(spec)
    try:
        dataset = load_experiment_dataset(exp)
    except OcrrError as err:
        if not args.fallback_demo or exp.dataset == "demo":
            raise
        _demo_banner(console, exp.dataset, err)
        exp.dataset = "demo"
        dataset = load_experiment_dataset(exp)
    configure_threads()
    out = args.out or Path("results") / f"{dataset.name}-{exp.policy.replace(':', '')}"
    started = time.perf_counter()
    with _Progress(console, args.quiet) as progress:
        result = run_experiment(exp, dataset, embed_progress=progress.embedding,
                                on_checkpoint=progress.checkpoint_factory(exp, n_checkpoints))
    paths = write_outputs(result, out)
    _print_table(console, result, TABLE_HEADER, table_rows)
    console.print(f"{len(result.per_checkpoint)} checkpoints in {time.perf_counter() - started:.1f} s; "
                  f"wrote {', '.join(p.name for p in paths.values())} to {out}/")
    return 0


def _demo_banner(console, name: str, err: OcrrError) -> None:
    from rich.panel import Panel

    console.print(Panel(
        f"[bold]{name} is not available here, so this run uses the small bundled 'demo' help-desk dataset.[/]\n"
        f"Its numbers are NOT the paper's benchmark.\n\nWhy: {err}\n\n"
        f"Fix: put the {name} files in a folder and pass --data-dir DIR (or set OCRR_DATA_DIR=DIR), "
        "or run where the upstream URL can be reached so ocrr can download them.",
        title="[bold red]RUNNING ON DEMO DATA[/]", border_style="red"))


def _print_table(console, result, header, table_rows) -> None:
    from rich.table import Table

    exp = result.experiment
    table = Table(title=f"{result.dataset.name} · {exp.policy} · {result.embeddings.encoder_id} · "
                        f"seeds {' '.join(map(str, exp.seeds))}")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in table_rows(result.summary):
        table.add_row(*row)
    console.print(table)


class _Progress:
    """A rich progress display for encoding and for the runs' checkpoints."""

    def __init__(self, console, quiet: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.quiet = quiet
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, disable=quiet)

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def embedding(self, total: int):
        task = self.bar.add_task("encoding texts (cached afterwards)", total=total)
        return lambda n: self.bar.advance(task, n)

    def checkpoint_factory(self, exp, n_checkpoints):
        state = {}

        def on_checkpoint(seed, spec, cp):
            if "task" not in state:
                state["task"] = self.bar.add_task("runs", total=None)
            key = (seed, spec)
            if key not in state:
                state[key] = True
                self.bar.update(state["task"], description=f"seed {seed} · {spec}")
            self.bar.advance(state["task"], 1)

        return on_checkpoint


def _cmd_embed(args) -> int:
    from rich.console import Console

    from ocrr.encoders import embed_dataset
    from ocrr.experiment import load_experiment_dataset

    console = Console()
    exp = _experiment(args)
    dataset = load_experiment_dataset(exp)
    with _Progress(console, quiet=False) as progress:
        emb = embed_dataset(dataset, exp.encoder, progress=progress.embedding)
    console.print(f"{dataset.name}: {len(emb.train)} train + {len(emb.test)} test vectors of dimension "
                  f"{emb.train.shape[1]} from {emb.encoder_id} ({emb.source}); sha256 {emb.sha256[:16]}…")
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
            tails = ", ".join(a[len(name):] for a in group[1:])
            summary += f". Aliases: {group[0]}{', ' + tails if tails else ''} (= {name}:{key}=N)"
        table.add_row(name, entry.family, hyper, summary)
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


if __name__ == "__main__":
    sys.exit(main())
