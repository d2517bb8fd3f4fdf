"""Names -> protocols, with ``name:key=value`` options (``heldout:every=25``).

Register your own with ``register_protocol(MyProtocol)``; ``ocrr run --protocol`` and
``ocrr sweep --protocol`` then accept its name.
"""

from __future__ import annotations

import difflib

from ocrr.errors import OcrrError
from ocrr.protocols.base import Protocol
from ocrr.protocols.cmr import CmrProtocol
from ocrr.protocols.drift import DriftProtocol
from ocrr.protocols.heldout import HeldoutProtocol
from ocrr.protocols.ocl import OclProtocol
from ocrr.specs import parse_spec

PROTOCOLS: dict[str, type[Protocol]] = {}


def register_protocol(cls: type[Protocol]) -> type[Protocol]:
    """Register a Protocol subclass under its ``name`` (usable as a class decorator)."""
    if not cls.name:
        raise OcrrError(f"{cls.__name__} has no name; set name = '...' on the class before registering it.")
    PROTOCOLS[cls.name] = cls
    return cls


def make_protocol(spec: str | Protocol, **extra) -> Protocol:
    """A protocol from 'name:key=value...' (``extra`` options fill in keys the spec lacks)."""
    if isinstance(spec, Protocol):
        return spec
    name, options = parse_spec(spec, "protocol", "heldout:every=25")
    if name not in PROTOCOLS:
        close = difflib.get_close_matches(name, PROTOCOLS, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise OcrrError(f"unknown protocol {name!r}.{hint} Known: {', '.join(sorted(PROTOCOLS))}.")
    return PROTOCOLS[name](**{**extra, **options})


for _builtin in (HeldoutProtocol, CmrProtocol, DriftProtocol, OclProtocol):
    register_protocol(_builtin)
