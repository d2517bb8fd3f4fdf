"""``ocrr systems``: the registered systems, a line each; one system's options, one family's
hyperparameters, or every system's (``--all``) on request."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ocrr.cli.common import add_command, console, print_hint
from ocrr.specs import describe, format_value
from ocrr.systems import REGISTRY, make_system
from ocrr.systems.registry import lookup, options_of


def add_parser(sub) -> None:
    p = add_command(
        sub,
        "systems",
        run,
        help="list registered systems, a line each; with NAME, that system's options",
        description="Without arguments: one line per registered system, grouped by family. "
        "With a system's name: its options (type, allowed values, default, help). With a family's "
        "name (e.g. retrieval): its systems with their hyperparameters. --all: every system with its "
        "hyperparameters.",
    )
    p.add_argument(
        "name",
        nargs="?",
        default=None,
        help="a system (list its options) or a family (list its systems' hyperparameters)",
    )
    p.add_argument(
        "--all",
        "-v",
        "--verbose",
        dest="all",
        action="store_true",
        help="every system with its hyperparameters and aliases (long)",
    )


def run(args) -> int:
    family = _family_named(args.name) if args.name else None
    if args.name and family is None:
        return _print_system(args.name)
    aliases, variants = _system_aliases(REGISTRY)
    rows = [name for name in _by_family(REGISTRY) if name not in aliases]  # an alias is shown with its base
    if family is not None:
        rows = [name for name in rows if REGISTRY[name].family == family]
    if family is not None or args.all:
        _print_detailed(rows, aliases, variants, f"{family} systems" if family else "registered systems")
    else:
        _print_short(rows, aliases)
    for message in REGISTRY.broken.values():  # a plug-in that did not load: said once, not listed
        print_hint(message)
    return 0


def _print_system(name: str) -> int:
    entry, options = lookup(name), options_of(name)  # an unknown name fails here, naming the close ones
    print(f"{name} ({entry.family}): {entry.summary}")
    print(describe(options) if options is not None else "(its options are not declared)")
    if options:
        key, option = next(iter(options.items()))
        print(f"Override as {name}:key=value, e.g. --systems {name}:{key}={format_value(option.default)}")
    return 0


def _print_short(rows: list[str], aliases: dict) -> None:
    """One line per system under a line naming its family, its description cut to the screen: builds
    no system. The family heads its group rather than filling a column that is empty on most rows,
    so the descriptions get the width (an 80-column terminal shows ~50 characters of each)."""
    screen = console(fit_terminal=True)
    name_width = max(map(len, rows), default=4)
    # the name in full (a longer family folds onto a second line); the description gets what is
    # left of the line (7: borders and padding)
    room = max(screen.width - name_width - 7, 20)
    table = Table()
    table.add_column("name", min_width=name_width, max_width=name_width)
    table.add_column("what it is", no_wrap=True)
    previous = None
    for name in rows:
        entry = REGISTRY[name]
        if entry.family != previous:
            if previous is not None:
                table.add_section()
            table.add_row(Text(f"{entry.family}:", style="bold"), "")
            previous = entry.family
        summary = Text(entry.summary)
        summary.truncate(room, overflow="ellipsis")
        table.add_row(name, summary)
    screen.print(table)
    for base, (key, members) in _alias_groups(aliases).items():
        screen.print(f"Aliases: {_alias_list(base, members)} (= {_alias_spec(base, key, members)})", highlight=False)
    screen.print(
        "One system's options: ocrr systems NAME. Hyperparameters: ocrr systems FAMILY, or ocrr systems --all.",
        highlight=False,
    )


def _print_detailed(rows: list[str], aliases: dict, variants: dict, title: str) -> None:
    """Every listed system with its hyperparameters (builds each one with its defaults)."""
    table = Table(title=f"{title} (override as name:key=value; 'ocrr systems NAME' lists a system's options)")
    table.add_column("name", no_wrap=True)
    table.add_column("family", no_wrap=True)
    table.add_column("hyperparameters", overflow="fold")
    table.add_column("what it is")
    groups = _alias_groups(aliases)
    for name in rows:
        entry = REGISTRY[name]
        summary = entry.summary
        if name in groups:
            key, members = groups[name]
            summary += f". Aliases: {_alias_list(name, members)} (= {_alias_spec(name, key, members)})"
        table.add_row(name, entry.family, _system_hyperparameters(name, entry, variants.get(name)), summary)
    console().print(table)


def _family_named(text: str) -> str | None:
    """The family a name means ('cmr-refinement', 'cmr_refinement' or 'cmr refinement'), if any."""
    key = text.replace("-", " ").replace("_", " ").strip().lower()
    families = {e.family.replace("-", " ").lower(): e.family for e in REGISTRY.values()}
    return families.get(key) if text not in REGISTRY else None


def _by_family(registry) -> list[str]:
    """Registered names, families together in the order each family first appears."""
    order = list(dict.fromkeys(e.family for e in registry.values()))
    return sorted(registry, key=lambda name: order.index(registry[name].family))  # stable: registry order within


def _alias_groups(aliases: dict) -> dict[str, tuple[str, list[str]]]:
    """{base: (key, [its aliases, in registry order])}."""
    groups: dict[str, tuple[str, list[str]]] = {}
    for alias, (base, key) in aliases.items():
        groups.setdefault(base, (key, []))[1].append(alias)
    return groups


def _alias_list(base: str, members: list[str]) -> str:
    """'bounded_fifo_100, _500, _1000' : the first in full, the others by their tail."""
    return ", ".join([members[0]] + [m[len(base) :] for m in members[1:]])


def _alias_spec(base: str, key: str, members: list[str]) -> str:
    """'bounded_fifo:budget=N' (numbers), 'consolidating:combine=head|fresh' (words)."""
    values = [m[len(base) + 1 :] for m in members]
    return f"{base}:{key}=" + ("N" if all(v.isdigit() for v in values) else "|".join(values))


def _system_aliases(registry) -> tuple[dict, dict]:
    """Spot names that only bake in one hyperparameter of another entry.

    Returns ({alias: (base, key)} for names like ``base_<value>`` of the base's family whose
    single baked-in override is ``key=<value>``, {variant: base} for other entries that share a factory
    with an entry that bakes in nothing (their rows list only what they change).
    """
    plain = {e.target: n for n, e in registry.items() if not e.defaults}  # by import path: loads no system
    aliases, variants = {}, {}
    for name, entry in registry.items():
        base = plain.get(entry.target)
        if not entry.defaults or base is None or base == name:
            continue
        (key, value), *more = entry.defaults.items()
        if not more and name == f"{base}_{value}" and entry.family == registry[base].family:
            aliases[name] = (base, key)
        else:
            variants[name] = base
    return aliases, variants


def _system_hyperparameters(name: str, entry, base: str | None) -> str:
    """'k=v, ...' of a default-built system, or why it cannot be built in this environment (an extra not installed)."""
    try:
        system = make_system(name)
        hyper = system.hyperparameters() if hasattr(system, "hyperparameters") else {}
    except Exception as err:  # e.g. an optional extra (peft, ray) that is not installed
        return f"[yellow]unavailable here: {type(err).__name__}: {err}[/]"
    if base is not None:  # a variant: show what it changes, the rest is the base's
        return ", ".join(f"{k}={hyper.get(k, v)}" for k, v in entry.defaults.items()) + f"; rest as {base}"
    return ", ".join(f"{k}={v}" for k, v in hyper.items()) or "(none)"
