"""Encoder names -> encoder factories, in the option grammar of every plug-in.

An encoder spec is a registered name followed by optional ``:key=value`` parts (the grammar of
``ocrr.specs``): ``minilm``, ``minilm:batch_size=32``, ``glove``. Two encoders take one value
as a bare part: ``st:<model id>`` (the ``model`` option) and ``precomputed:<file>`` (``file``).
``make_encoder`` checks every value against the encoder's declared options before anything
loads, so a bad one ends in one message naming the option, the value and what is allowed.

An encoder's ``id`` is part of every embedding-cache key and result row; options that do not
change the vectors (``batch_size``) stay out of it.

``ENCODERS`` is an ``ocrr.registry.Registry``: the built-ins are registered by
``ocrr.encoders.catalog``, plug-ins from other packages through the ``ocrr.encoders``
entry-point group (a factory called with the validated options, which it declares in an
``options`` attribute: a dict of ``ocrr.specs.Option``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ocrr.encoders.base import Encoder
from ocrr.errors import OcrrError
from ocrr.registry import Registry, summary_of
from ocrr.specs import Option, declared_options, describe, parse_spec, spec_name, validate


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


def _adopt(name: str, factory: object) -> RegisteredEncoder:
    """A plug-in's entry: its factory, with the options it declares in ``options``."""
    if not callable(factory):
        raise OcrrError(f"it is a {type(factory).__name__}, not an encoder factory")
    return RegisteredEncoder(name, factory, summary_of(factory), declared_options(factory))


def _describe(name: str, entry: RegisteredEncoder) -> str:
    extra = f" Needs: pip install -e '.[{entry.extra}]'." if entry.extra else ""
    return f"{entry.name}: {entry.summary}.{extra}\n{describe(entry.options)}"


ENCODERS: Registry[RegisteredEncoder] = Registry(
    "encoder", hint=lambda: f"Use {_usage()}.", group="ocrr.encoders", adopt=_adopt, describe=_describe
)


def register_encoder(entry: RegisteredEncoder) -> None:
    """Add an encoder (a plug-in package may register its own)."""
    ENCODERS.register(entry.name, entry)


def encoder_names() -> list[str]:
    return ENCODERS.names()


def lookup_encoder(name: str) -> RegisteredEncoder:
    return ENCODERS.lookup(name)


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
    return ENCODERS.describe(name)


def _usage() -> str:
    """'minilm, glove, ..., st:<model> or precomputed:<file>': every registered name, as written."""
    names = [f"{e.name}:<{e.qualifier}>" if e.qualifier else e.name for e in ENCODERS.values()]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def _example(entry: RegisteredEncoder) -> str:
    if entry.qualifier:
        return f"{entry.name}:<{entry.qualifier}>"
    return f"{entry.name}:batch_size=32" if "batch_size" in entry.options else entry.name
