"""Names -> protocols, with ``name:key=value`` options (``heldout:every=25``).

Register your own with ``register_protocol(MyProtocol)`` (a class decorator), or from another
package through the ``ocrr.protocols`` entry-point group (ocrr.registry); ``ocrr run
--protocol`` and ``ocrr sweep --protocol`` then accept its name.
"""

from __future__ import annotations

from ocrr.errors import OcrrError
from ocrr.protocols.base import COMMON_OPTIONS, Protocol
from ocrr.protocols.cmr import CmrProtocol
from ocrr.protocols.drift import DriftProtocol
from ocrr.protocols.heldout import HeldoutProtocol
from ocrr.protocols.language_shift import LanguageShiftProtocol
from ocrr.protocols.ocl import OclProtocol
from ocrr.registry import Registry
from ocrr.specs import Option, parse_spec


def _adopt(name: str, cls: object) -> type[Protocol]:
    """A plug-in's Protocol subclass, whose ``name`` is its entry point's (results and task ids
    record the class's own name)."""
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise OcrrError(f"it is {cls!r}, not a subclass of ocrr.protocols.Protocol")
    if cls.name != name:
        raise OcrrError(f"its class's name is {cls.name!r} but its entry point is named {name!r}: make them the same")
    return cls


PROTOCOLS: Registry[type[Protocol]] = Registry(
    "protocol", hint="Run 'ocrr protocols' to list them.", group="ocrr.protocols", adopt=_adopt
)


def register_protocol(cls: type[Protocol]) -> type[Protocol]:
    """Register a Protocol subclass under its ``name`` (usable as a class decorator)."""
    if not cls.name:
        raise OcrrError(f"{cls.__name__} has no name; set name = '...' on the class before registering it.")
    return PROTOCOLS.register(cls.name, cls)


def options_of(protocol: str | type[Protocol]) -> dict[str, Option]:
    """Every option a protocol accepts, as ``Protocol.__init__`` validates them: its own, then
    the common ones every protocol takes (``shift``). What ``ocrr protocols`` lists, so a common
    option cannot be left out of a protocol's listing."""
    cls = lookup(protocol) if isinstance(protocol, str) else protocol
    return {**cls.options, **{k: o for k, o in COMMON_OPTIONS.items() if k not in cls.options}}


def make_protocol(spec: str | Protocol, **extra) -> Protocol:
    """A protocol from 'name:key=value...' (``extra`` options fill in keys the spec lacks)."""
    if isinstance(spec, Protocol):
        return spec
    name, options = parse_spec(spec, "protocol", "heldout:every=25")
    return lookup(name)(**{**extra, **options})


def lookup(name: str) -> type[Protocol]:
    """The registered protocol class of a name; an unknown name fails naming the close ones."""
    return PROTOCOLS.lookup(name)


for _builtin in (HeldoutProtocol, CmrProtocol, DriftProtocol, OclProtocol, LanguageShiftProtocol):
    register_protocol(_builtin)
