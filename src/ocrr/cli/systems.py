"""``ocrr systems``: the registered systems and their hyperparameters."""

from __future__ import annotations

from rich.table import Table

from ocrr.cli.common import console
from ocrr.specs import describe, format_value
from ocrr.systems import REGISTRY, make_system
from ocrr.systems.registry import lookup, options_of


def add_parser(sub) -> None:
    p = sub.add_parser("systems", help="list registered systems; with NAME, that system's options")
    p.add_argument("name", nargs="?", default=None, help="a system: list its options (type, allowed, default, help)")
    p.set_defaults(handler=run)


def run(args) -> int:
    if args.name:
        entry, options = lookup(args.name), options_of(args.name)
        print(f"{args.name} ({entry.family}): {entry.summary}")
        print(describe(options) if options is not None else "(its options are not declared)")
        if options:
            key, option = next(iter(options.items()))
            print(f"Override as {args.name}:key=value, e.g. --systems {args.name}:{key}={format_value(option.default)}")
        return 0
    aliases, variants = _system_aliases(REGISTRY)
    table = Table(title="registered systems (override as name:key=value; 'ocrr systems NAME' lists a system's options)")
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
    console().print(table)
    return 0


def _system_aliases(registry) -> tuple[dict, dict]:
    """Spot names that only bake in one hyperparameter of another entry.

    Returns ({alias: (base, key)} for names like ``base_<value>`` whose single baked-in
    override is ``key=<value>``, {variant: base} for other entries that share a factory
    with an entry that bakes in nothing (their rows list only what they change).
    """
    plain = {e.target: n for n, e in registry.items() if not e.defaults}  # by import path: loads no system
    aliases, variants = {}, {}
    for name, entry in registry.items():
        base = plain.get(entry.target)
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
    try:
        system = make_system(name)
        hyper = system.hyperparameters() if hasattr(system, "hyperparameters") else {}
    except Exception as err:  # e.g. an optional extra (peft, ray) that is not installed
        return f"[yellow]unavailable here: {type(err).__name__}: {err}[/]"
    if base is not None:  # a variant: show what it changes, the rest is the base's
        return ", ".join(f"{k}={hyper.get(k, v)}" for k, v in entry.defaults.items()) + f"; rest as {base}"
    return ", ".join(f"{k}={v}" for k, v in hyper.items()) or "(none)"
