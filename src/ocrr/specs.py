"""Specs of the form ``name:key=value:key=value`` (systems, protocols) and canonical JSON.

One parser for every registry, so ``substrate:k=3`` and ``heldout:every=25`` read alike, and
one canonical JSON form, so a configuration hashes to the same task id in any process.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ocrr.errors import OcrrError


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
    return str(spec).strip().split(":", 1)[0].strip()


def parse_spec(spec: str, what: str = "system", example: str = "substrate:k=3") -> tuple[str, dict]:
    """'name:key=value:key=value' -> (name, {key: value})."""
    name, *parts = spec.strip().split(":")
    overrides = {}
    for part in parts:
        if "=" not in part:
            raise OcrrError(f"{what} spec {spec!r}: {part!r} is not key=value. Write e.g. '{example}'.")
        key, value = part.split("=", 1)
        overrides[key.strip()] = parse_value(value.strip())
    return name.strip(), overrides


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


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_json_default)


def _json_default(value: Any):
    if isinstance(value, np.generic):  # numpy scalars in a system's hyperparameters
        return value.item()
    if isinstance(value, (tuple, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return str(value)
