"""One option grammar for every plug-in (systems, protocols, policies, feedback, datasets).

A plug-in is named by a spec, ``name:key=value:key=value`` (``substrate:k=3``,
``heldout:every=25``): ``parse_spec`` reads it, ``parse_value`` reads each value. Each plug-in
declares its options once, as ``Option`` s (type, constraint, default, help line), in the
manner of scikit-learn's ``utils/_param_validation.py``; ``validate`` checks given values
against them, so every refusal names the option, the value and what is allowed; ``describe``
renders the declarations (``ocrr systems NAME``, ``ocrr protocols NAME``).

Spec strings are written into results and hashed into task ids, so the grammar never changes:
``format_spec`` writes a canonical spec, and ``canonical_json`` the canonical JSON of a
configuration (the same task id in any process).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ocrr.errors import OcrrError

# -- the grammar -------------------------------------------------------------------------------


def parse_value(text: str):
    """'3' -> 3, '0.1' -> 0.1, 'true' -> True, 'none' -> None, anything else stays text."""
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def spec_name(spec: str) -> str:
    """The registered name a spec starts with: 'substrate:k=3' -> 'substrate'."""
    return str(spec).strip().partition(":")[0].strip()


def parse_spec(
    spec: str, what: str = "system", example: str = "substrate:k=3", qualifiers: Mapping[str, str] | None = None
) -> tuple[str, dict]:
    """'name:key=value:key=value' -> (name, {key: value}).

    ``qualifiers`` lets a bare part (no ``=``) qualify the part before it, for the policies'
    shorthand ``random:0.25`` and ``noise=0.1:confusable``: {previous key or the name: the key a
    bare part after it sets}. Without it every part after the name must be key=value.
    """
    name, *parts = str(spec).strip().split(":")
    name = name.strip()
    qualifiers = qualifiers or {}
    options: dict = {}
    previous = name
    for part in (p.strip() for p in parts):
        if "=" in part:
            key, value = (s.strip() for s in part.split("=", 1))
        elif previous in qualifiers:
            key, value = qualifiers[previous], part
        else:
            raise OcrrError(f"{what} spec {spec!r}: {part!r} is not key=value. Write e.g. '{example}'.")
        if key in options:
            raise OcrrError(f"{what} spec {spec!r}: {key} is given twice; give it once. Write e.g. '{example}'.")
        options[key] = parse_value(value)
        previous = key
    return name, options


def parse_assignments(items: Iterable[str], what: str, example: str) -> dict:
    """['KEY=VALUE', ...] (e.g. repeated ``--data-option`` flags) -> {key: value}."""
    options = {}
    for item in items:
        key, equals, value = str(item).partition("=")
        if not equals or not key.strip():
            raise OcrrError(f"{what} {item!r} is not KEY=VALUE, e.g. {example}.")
        options[key.strip()] = parse_value(value.strip())
    return options


def format_value(value: Any) -> str:
    """Spec text for a value that parse_value reads back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return repr(value) if isinstance(value, float) else str(value)


def format_spec(name: str, options: dict) -> str:
    """The canonical spec: options sorted by key, values normalised."""
    return name + "".join(f":{k}={format_value(options[k])}" for k in sorted(options))


# -- declarations and the validator --------------------------------------------------------------


class _FromSignature:
    """The default of an option whose owner's constructor signature holds it."""

    def __repr__(self) -> str:
        return "FROM_SIGNATURE"


FROM_SIGNATURE: Any = _FromSignature()
_KINDS = {
    int: "an integer",
    float: "a number",
    bool: "true or false",
    str: "text",
    Path: "a path",
    object: "any value",
}
_TYPE_NAMES = {int: "integer", float: "number", bool: "bool", str: "text", Path: "path", object: "any"}


@dataclass(frozen=True)
class Option:
    """One option of a plug-in: its default, its type, the values it allows, a help line.

    Bounds: ``low``/``high`` are inclusive, ``gt``/``lt`` exclusive. ``choices`` lists the
    values a text option allows. A system declares its default here (``ocrr.systems.base.System``
    takes it from the declaration); one left unset is read from the constructor's signature.
    """

    default: Any = FROM_SIGNATURE
    kind: type = int  # int, float, bool, str, Path, or object (any value: a plug-in's undeclared argument)
    low: float | None = None
    high: float | None = None
    allow_none: bool = False
    help: str = ""
    choices: tuple = ()
    gt: float | None = None
    lt: float | None = None

    def allowed(self) -> str:
        """What the option allows, in words: 'an integer ≥ 1', 'one of a, b', 'a number in [0, 1]'."""
        if self.choices:
            text = "one of " + ", ".join(map(format_value, self.choices))
        else:
            text = _KINDS[self.kind] + _bounds(self.low, self.gt, self.high, self.lt)
        return text + (" or none" if self.allow_none else "")

    def type_name(self) -> str:
        return _TYPE_NAMES[self.kind]

    def accepts(self, value: Any) -> bool:
        if self.kind is object:
            return True
        if value is None:
            return self.allow_none
        if self.kind is bool:
            return isinstance(value, (bool, np.bool_))
        if self.kind is str:
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if self.kind is Path:
            return isinstance(value, (str, Path))
        numbers = (int, np.integer) if self.kind is int else (int, float, np.integer, np.floating)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers) or not math.isfinite(value):
            return False
        return bool(  # (numpy scalars compare to numpy bools)
            (self.low is None or value >= self.low)
            and (self.high is None or value <= self.high)
            and (self.gt is None or value > self.gt)
            and (self.lt is None or value < self.lt)
            and (not self.choices or value in self.choices)
        )

    def check(self, owner: str, key: str, value: Any, hint: str = "") -> Any:
        """``value`` if allowed (an int widened to float where a number is declared, a path's
        text made a Path), else an OcrrError: '<owner>: <key> must be <allowed>, got <value>. <hint>'."""
        if not self.accepts(value):
            shown = repr(value) if isinstance(value, str) else format_value(value)
            raise OcrrError(f"{owner}: {key} must be {self.allowed()}, got {shown}.{_space(hint)}")
        if self.kind is float and isinstance(value, (int, np.integer)):
            return float(value)
        if self.kind is Path and isinstance(value, str):
            return Path(value)
        return value


def option(**declaration: Any) -> Any:
    """A dataclass field declared once, as an ``Option`` (its ``default`` is the field's; none
    given: a required field), for a plug-in or a configuration written as a dataclass::

        k: int = option(default=5, kind=int, low=1, help="neighbours retrieved per query")

    ``field_options`` reads the declarations back, for ``validate`` and ``describe``."""
    declared = Option(**declaration)
    if declared.default is FROM_SIGNATURE:
        return dataclasses.field(metadata={_OPTION: declared})
    return dataclasses.field(default=declared.default, metadata={_OPTION: declared})


def field_options(cls: Any) -> dict[str, Option]:
    """The ``Option`` of each field of a dataclass declared with ``option``, in field order."""
    return {f.name: f.metadata[_OPTION] for f in dataclasses.fields(cls) if _OPTION in f.metadata}


_OPTION = "ocrr.specs.Option"  # the key of a field's declaration in its dataclass metadata


def validate(owner: str, declared: Mapping[str, Option], given: Mapping[str, Any], hint: str = "") -> dict:
    """``given`` checked against ``declared``; raise one OcrrError for an unknown key or a bad
    value. ``owner`` names the plug-in ('system substrate'); ``hint`` ends every message
    ("Run 'ocrr systems substrate' to list its options.")."""
    for key in given:
        if key not in declared:
            raise unknown_option(owner, key, declared, hint)
    return {key: declared[key].check(owner, key, value, hint) for key, value in given.items()}


def unknown_option(owner: str, key: str, declared: Iterable[str], hint: str = "") -> OcrrError:
    """'<owner> has no option <key>. Did you mean <closest>? Its options: ...'."""
    known = list(declared)
    close = difflib.get_close_matches(str(key), known, n=1)
    guess = f" Did you mean {close[0]}?" if close else ""
    listed = ", ".join(known) if known else "none"
    return OcrrError(f"{owner} has no option {key}.{guess} Its options: {listed}.{_space(hint)}")


def declared_options(plugin: object) -> dict[str, Option]:
    """The options a plug-in (a dataset loader, an encoder factory) declares in its ``options``
    attribute, a dict of ``Option`` (none: no options); anything else is refused."""
    declared = getattr(plugin, "options", None) or {}
    if not isinstance(declared, Mapping) or not all(isinstance(o, Option) for o in declared.values()):
        raise OcrrError("its options attribute must map option names to ocrr.specs.Option")
    return dict(declared)


def describe(declared: Mapping[str, Option], defaults: Mapping[str, Any] | None = None) -> str:
    """One line per option: name, type, what it allows, default, help (what the CLI prints).
    ``defaults`` overrides declared defaults (a registered alias's baked-in values)."""
    if not declared:
        return "(no options)"
    rows = [("option", "type", "allowed", "default", "help")]
    for key, opt in declared.items():
        default = (defaults or {}).get(key, opt.default)
        rows.append((key, opt.type_name(), opt.allowed(), format_value(default), opt.help))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4] for row in rows)


def _bounds(low, gt, high, lt) -> str:
    lower = (low, "[", "≥") if low is not None else (gt, "(", ">") if gt is not None else None
    upper = (high, "]", "≤") if high is not None else (lt, ")", "<") if lt is not None else None
    if lower and upper:
        return f" in {lower[1]}{lower[0]:g}, {upper[0]:g}{upper[1]}"
    either = lower or upper
    if either:
        bound, _, sign = either
        return f" {sign} {bound:g}"
    return ""


def _space(hint: str) -> str:
    return f" {hint}" if hint else ""


# -- canonical JSON ------------------------------------------------------------------------------


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_json_default)


def _json_default(value: Any):
    if isinstance(value, np.generic):  # numpy scalars in a system's hyperparameters
        return value.item()
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)
