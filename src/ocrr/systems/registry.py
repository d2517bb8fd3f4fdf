"""Names -> system factories, with ``name:key=value`` hyperparameter overrides.

A spec is a registered name followed by optional ``:key=value`` parts, for example
``substrate:k=3:margin=0.1`` (the grammar of ``ocrr.specs``). ``make_system`` checks every
value against the system's declared options before its constructor runs, so a bad one ends
in one message naming the option, the value and what is allowed.

``REGISTRY`` is an ``ocrr.registry.Registry``: the built-ins are registered by
``ocrr.systems.catalog`` (imported with this package), plug-ins from other packages through
the ``ocrr.systems`` entry-point group (a System subclass or a factory taking ``name``,
``labels``, ``seed`` and its options; see ``ocrr.registry``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ocrr.errors import OcrrError
from ocrr.registry import Registry, load_target, summary_of
from ocrr.specs import Option, parse_spec, parse_value, validate  # noqa: F401  (parse_*: re-exported)
from ocrr.systems.base import RUN_ARGUMENTS

PLUGIN_FAMILY = "plug-in"  # the family of a plug-in system that names none


@dataclass(frozen=True)
class Registered:
    """One registry entry. ``target`` is the factory (usually the class) or its import path
    ("module:Class" under ocrr.systems), imported when the system is first built."""

    name: str
    target: Callable[..., object] | str
    family: str
    summary: str
    defaults: dict = field(default_factory=dict)  # overrides baked into this name
    in_all: bool = True  # part of `--systems all`

    @property
    def factory(self) -> Callable[..., object]:
        return self.target if callable(self.target) else load_target(self.target, "ocrr.systems")


def _adopt(name: str, factory: object) -> Registered:
    """A plug-in's entry: its class or factory, in its own ``family`` (else 'plug-in'), in
    ``--systems all`` unless it sets ``in_all = False``."""
    if not callable(factory):
        raise OcrrError(f"it is a {type(factory).__name__}, not a System subclass or a factory")
    family = getattr(factory, "family", None)
    in_all = getattr(factory, "in_all", True)
    return Registered(
        name, factory, family if isinstance(family, str) else PLUGIN_FAMILY, summary_of(factory), {}, in_all
    )


REGISTRY: Registry[Registered] = Registry(
    "system", hint="Run 'ocrr systems' to list them.", group="ocrr.systems", adopt=_adopt
)


def register(
    name: str, factory: Callable[..., object] | str, family: str, summary: str, *, in_all: bool = True, **defaults
) -> None:
    """Register a system: its factory (usually the class) or its import path "module:Class"
    under ocrr.systems. ``in_all=False`` keeps it out of ``--systems all`` (parametrised
    generic names whose aliases are listed, and systems that need an optional extra)."""
    REGISTRY.register(name, Registered(name, factory, family, summary, defaults, in_all))


def lookup(name: str) -> Registered:
    """The registry entry of a system name (without ``:key=value`` parts)."""
    return REGISTRY.lookup(name)


def execution_settings(name: str) -> tuple[str, ...]:
    """Constructor arguments of a registered system that say how to run it, not what it
    computes (``System.execution_settings``, e.g. lora's device): a spec's overrides of
    these must not change what a run is, so task ids leave them out."""
    return tuple(getattr(lookup(name).factory, "execution_settings", ()))


def registered_names() -> list[str]:
    """Every registered system name, sorted."""
    return sorted(REGISTRY)


def options_of(name: str) -> dict[str, Option] | None:
    """The options a registered name takes, its baked-in values as their defaults; None for a
    plug-in factory whose options cannot be known (one taking ``**kwargs``, not a System)."""
    entry = lookup(name)
    declared = getattr(entry.factory, "declared_options", None)
    options = declared() if declared is not None else _signature_options(entry.factory)
    if options is None:
        return None
    return {k: dataclasses.replace(o, default=entry.defaults.get(k, o.default)) for k, o in options.items()}


def make_system(spec: str, *, labels: Sequence[str] | None = None, seed: int = 0):
    """Build the system a spec names, seeded and told the dataset's label list."""
    name, overrides = parse_spec(spec)
    entry = lookup(name)
    kwargs = {**entry.defaults, **overrides}
    declared = options_of(name)
    if declared is not None:  # at the door: the constructor gets the values as written
        validate(f"system {name}", declared, kwargs, hint=f"Run 'ocrr systems {name}' to list its options.")
    try:
        return entry.factory(
            name=spec.strip(), labels=list(labels) if labels is not None else None, seed=seed, **kwargs
        )
    except (TypeError, ValueError) as err:  # a plug-in without declared options refused a value
        if declared is not None:
            raise
        raise OcrrError(f"system {spec!r}: {err}. Fix that value in the spec, or see 'ocrr systems {name}'.") from None


def expand_systems(specs: Sequence[str]) -> list[str]:
    """Split comma lists and expand 'all' to every registered system except those marked
    in_all=False (the LoRA systems, and generic names whose per-budget aliases are in)."""
    out: list[str] = []
    for item in specs:
        for spec in filter(None, (s.strip() for s in item.split(","))):
            out.extend([n for n, r in REGISTRY.items() if r.in_all] if spec == "all" else [spec])
    return list(dict.fromkeys(out))  # first occurrence of each, in order


def _signature_options(factory: Callable[..., object]) -> dict[str, Option] | None:
    """A plain factory's keyword parameters as options of any value (None if it takes **kwargs)."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return None
    return {p.name: Option(p.default, object) for p in params if p.name not in RUN_ARGUMENTS}
