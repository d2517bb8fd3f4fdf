"""Encoder names -> encoder factories, in the option grammar of every plug-in.

An encoder spec is a registered name followed by optional ``:key=value`` parts (the grammar of
``ocrr.specs``): ``minilm``, ``minilm:batch_size=32``, ``glove``. Two encoders take one value
as a bare part: ``st:<model id>`` (the ``model`` option) and ``precomputed:<file>`` (``file``).
``make_encoder`` checks every value against the encoder's declared options before anything
loads, so a bad one ends in one message naming the option, the value and what is allowed.

An encoder's ``id`` is part of every embedding-cache key and result row; options that do not
change the vectors (``batch_size``) stay out of it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ocrr.encoders.base import Encoder
from ocrr.errors import OcrrError
from ocrr.specs import Option, describe, parse_spec, spec_name, validate


@dataclass(frozen=True)
class RegisteredEncoder:
    """One registry entry: a factory called with the validated options."""

    name: str
    factory: Callable[..., Encoder]
    summary: str
    options: Mapping[str, Option] = field(default_factory=dict)
    qualifier: str | None = None  # the option a bare part after the name sets (st:<model>)
    extra: str | None = None  # the pip extra that installs it (None: a base dependency)
    required: tuple[str, ...] = ()  # options without a default
    dataset_level: bool = False  # precomputed vectors: not texts -> vectors, handled by embed_dataset


ENCODERS: dict[str, RegisteredEncoder] = {}


def register_encoder(entry: RegisteredEncoder) -> None:
    """Add an encoder (a plug-in package may register its own)."""
    ENCODERS[entry.name] = entry


def encoder_names() -> list[str]:
    return sorted(ENCODERS)


def lookup_encoder(name: str) -> RegisteredEncoder:
    if name not in ENCODERS:
        close = difflib.get_close_matches(name, ENCODERS, n=2)
        guess = f" Did you mean {', '.join(close)}?" if close else ""
        raise OcrrError(f"unknown encoder {name!r}.{guess} Use {_usage()}.")
    return ENCODERS[name]


def parse_encoder_spec(spec: str) -> tuple[RegisteredEncoder, dict]:
    """The entry a spec names and its options, checked (defaults filled in)."""
    text = str(spec).strip()
    entry = lookup_encoder(spec_name(text))
    qualifiers = {entry.name: entry.qualifier} if entry.qualifier else None
    _, given = parse_spec(text, what="encoder", example=_example(entry), qualifiers=qualifiers)
    hint = f"Write e.g. '{_example(entry)}'."
    options = validate(f"encoder {entry.name}", entry.options, given, hint=hint)
    missing = [key for key in entry.required if options.get(key) in (None, "")]
    if missing:
        raise OcrrError(f"encoder {entry.name} needs {', '.join(missing)}. {hint}")
    defaults = {k: o.default for k, o in entry.options.items() if k not in entry.required}
    return entry, {**defaults, **options}


def make_encoder(spec: str) -> Encoder:
    """The encoder a spec names, built but not loaded (loading waits for the first texts)."""
    entry, options = parse_encoder_spec(spec)
    if entry.dataset_level:
        raise OcrrError(
            f"encoder {entry.name} reads vectors per dataset, not texts; use it as --encoder {spec} "
            "with ocrr run / ocrr sweep, or give a text encoder (e.g. minilm)."
        )
    return entry.factory(**options)


def describe_encoder(name: str) -> str:
    """What ``ocrr encoders NAME`` would print: the summary, the extra, the options."""
    entry = lookup_encoder(name)
    extra = f" Needs: pip install 'ocrr[{entry.extra}]'." if entry.extra else ""
    return f"{entry.name}: {entry.summary}.{extra}\n{describe(entry.options)}"


def _usage() -> str:
    """'minilm, glove, ..., st:<model> or precomputed:<file>': every registered name, as written."""
    names = [f"{e.name}:<{e.qualifier}>" if e.qualifier else e.name for e in ENCODERS.values()]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def _example(entry: RegisteredEncoder) -> str:
    if entry.qualifier:
        return f"{entry.name}:<{entry.qualifier}>"
    return f"{entry.name}:batch_size=32" if "batch_size" in entry.options else entry.name
