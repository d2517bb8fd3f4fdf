"""Names -> system factories, with ``name:key=value`` hyperparameter overrides.

A spec is a registered name followed by optional ``:key=value`` parts, for example
``substrate:k=3:margin=0.1``. Values are parsed as int, float, bool or None where
they look like one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ocrr.errors import OcrrError
from ocrr.specs import parse_spec, parse_value  # noqa: F401  (one spec parser for every registry; re-exported)


@dataclass(frozen=True)
class Registered:
    name: str
    factory: Callable[..., object]
    family: str
    summary: str
    defaults: dict = field(default_factory=dict)  # overrides baked into this name
    in_all: bool = True  # part of `--systems all`


REGISTRY: dict[str, Registered] = {}


def register(
    name: str, factory: Callable[..., object], family: str, summary: str, *, in_all: bool = True, **defaults
) -> None:
    """Register a system. ``in_all=False`` keeps it out of ``--systems all`` (parametrised
    generic names whose aliases are listed, and systems that need an optional extra)."""
    REGISTRY[name] = Registered(name, factory, family, summary, defaults, in_all)


def lookup(name: str) -> Registered:
    """The registry entry of a system name (without ``:key=value`` parts)."""
    _ensure_builtins()
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise OcrrError(f"unknown system {name!r}.{hint} Run 'ocrr systems' to list them.")
    return REGISTRY[name]


def execution_settings(name: str) -> tuple[str, ...]:
    """Constructor arguments of a registered system that say how to run it, not what it
    computes (``System.execution_settings``, e.g. lora's device): a spec's overrides of
    these must not change what a run is, so task ids leave them out."""
    return tuple(getattr(lookup(name).factory, "execution_settings", ()))


def registered_names() -> list[str]:
    """Every registered system name, sorted (built-ins included)."""
    _ensure_builtins()
    return sorted(REGISTRY)


def make_system(spec: str, *, labels: Sequence[str] | None = None, seed: int = 0):
    """Build the system a spec names, seeded and told the dataset's label list."""
    name, overrides = parse_spec(spec)
    entry = lookup(name)
    kwargs = {**entry.defaults, **overrides}
    try:
        return entry.factory(
            name=spec.strip(), labels=list(labels) if labels is not None else None, seed=seed, **kwargs
        )
    except TypeError as err:  # an unknown hyperparameter name
        raise OcrrError(f"system {spec!r}: {err}. Run 'ocrr systems' to see its hyperparameters.") from None
    except ValueError as err:  # a value the system's constructor refuses (k=-3, ...)
        raise OcrrError(
            f"system {spec!r}: {err}. Fix that value in the spec; 'ocrr systems' lists every "
            "hyperparameter with its default."
        ) from None


def expand_systems(specs: Sequence[str]) -> list[str]:
    """Split comma lists and expand 'all' to every registered system except those marked
    in_all=False (the LoRA systems, and generic names whose per-budget aliases are in)."""
    _ensure_builtins()
    out: list[str] = []
    for item in specs:
        for spec in filter(None, (s.strip() for s in item.split(","))):
            out.extend([n for n, r in REGISTRY.items() if r.in_all] if spec == "all" else [spec])
    seen = set()
    return [s for s in out if not (s in seen or seen.add(s))]


def _ensure_builtins() -> None:
    # Importing the catalog registers the built-in systems; Python runs it once, even if
    # a plugin or test registered something first.
    import ocrr.systems.catalog  # noqa: F401
