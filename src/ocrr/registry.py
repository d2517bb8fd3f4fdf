"""One registry shape for every kind of plug-in: systems, protocols, encoders, datasets,
policies, report presentations and the CLI's commands.

A ``Registry`` maps names to entries (whatever its kind stores: a system's ``Registered``
entry, a protocol class, an encoder entry ...). It is a mutable mapping, so
``REGISTRY[name]``, ``name in REGISTRY`` and iteration work as on a dict, plus:

* ``register(name, entry)``: add or replace one;
* ``lookup(name)``: the entry, or one ``OcrrError``: "unknown system 'substrat'. Did you
  mean substrate? Run 'ocrr systems' to list them.";
* ``names()``: every name, sorted; ``describe(name)``: a kind's text about one entry.

An entry may name its code lazily as ``"module:attribute"`` (``load_target`` imports it on
first use), so listing systems never imports torch.

Plug-ins from other packages
----------------------------
A distribution adds plug-ins through entry points in the groups ``ocrr.systems``,
``ocrr.protocols``, ``ocrr.datasets`` and ``ocrr.encoders``. In its ``pyproject.toml``::

    [project.entry-points."ocrr.systems"]
    my_knn = "my_package.systems:MyKNN"        # a System subclass or a factory

    [project.entry-points."ocrr.protocols"]
    pairs = "my_package.protocols:PairsProtocol"  # a Protocol subclass

    [project.entry-points."ocrr.datasets"]
    tickets = "my_package.data:load_tickets"    # loader(data_dir=None, **options) -> Dataset

    [project.entry-points."ocrr.encoders"]
    tfidf = "my_package.encoders:TfidfEncoder"  # factory(**options) -> Encoder

The entry point's object (a class or factory, never a hook that registers itself) is
registered under the entry point's name; ``--systems my_knn``, ``--protocol pairs``,
``--dataset tickets`` and ``--encoder tfidf`` then name it. Its options come from where
the built-ins declare theirs: a System's ``options`` and constructor signature, a Protocol's
``options``, a loader's or encoder factory's ``options`` attribute (a dict of
``ocrr.specs.Option``); its one-line summary from a ``summary`` attribute or the first line
of its docstring. A plug-in cannot replace a built-in of the same name.

Plug-ins are loaded once, when their registry is first looked into. One that fails to load
(an import error, a wrong kind of object) is kept aside: looking it up raises one
``OcrrError`` naming the distribution and the fix, while every other name still lists and
works.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator, MutableMapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

from ocrr.errors import OcrrError

V = TypeVar("V")

# The entry-point groups third-party packages register plug-ins in (module docstring).
PLUGIN_GROUPS = ("ocrr.systems", "ocrr.protocols", "ocrr.datasets", "ocrr.encoders")


def load_target(target: str, package: str = "") -> Any:
    """The object a ``"module:attribute"`` target names, imported now. ``package`` prefixes a
    relative module (``load_target("substrate:Substrate", "ocrr.systems")``)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(f"{package}.{module}" if package else module), attribute)


def summary_of(obj: object) -> str:
    """A plug-in's one-line summary: its ``summary`` attribute, else its docstring's first line."""
    text = getattr(obj, "summary", None) or (getattr(obj, "__doc__", None) or "").strip()
    return str(text).strip().splitlines()[0].rstrip(".") if str(text).strip() else "(no summary)"


class Registry(MutableMapping[str, V], Generic[V]):
    """Names -> entries of one kind, with "did you mean" lookups and entry-point plug-ins.

    ``kind`` names one entry in messages ("system"); ``hint`` ends the message for an unknown
    name (text, or a function returning it, for a list that grows with registrations);
    ``group`` is the entry-point group whose plug-ins join on first use, each turned into an
    entry by ``adopt(name, loaded object)``; ``describe`` renders one entry for ``describe()``.
    """

    def __init__(
        self,
        kind: str,
        *,
        hint: str | Callable[[], str] = "",
        group: str | None = None,
        adopt: Callable[[str, Any], V] | None = None,
        describe: Callable[[str, V], str] | None = None,
    ) -> None:
        if group is not None and adopt is None:
            raise ValueError(f"a {kind} registry with plug-ins (group {group}) needs adopt")
        self.kind, self.group = kind, group
        self._hint, self._adopt, self._describe = hint, adopt, describe
        self._entries: dict[str, V] = {}
        self._broken: dict[str, str] = {}  # plug-in name -> why it did not load, and the fix
        self._plugins: set[str] = set()  # names registered from entry points
        self._plugins_loaded = group is None

    # -- the mapping ---------------------------------------------------------------------------

    def __getitem__(self, name: str) -> V:
        self.load_plugins()
        return self._entries[name]

    def __setitem__(self, name: str, entry: V) -> None:
        self._entries[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"

    # -- the registry ----------------------------------------------------------------------------

    def register(self, name: str, entry: V) -> V:
        """Add ``entry`` under ``name`` (replacing one of that name); returns the entry."""
        self._entries[name] = entry
        return entry

    def lookup(self, name: str) -> V:
        """The entry of ``name``; an unknown or broken name raises one OcrrError naming the fix."""
        if name in self:
            return self._entries[name]
        if name in self._broken:
            raise OcrrError(self._broken[name])
        raise self.unknown(name)

    def unknown(self, name: str) -> OcrrError:
        """The error for a name nothing is registered under: the close names, then the hint."""
        close = difflib.get_close_matches(str(name), list(self), n=3)
        guess = f" Did you mean {', '.join(close)}?" if close else ""
        hint = self._hint() if callable(self._hint) else self._hint
        return OcrrError(f"unknown {self.kind} {name!r}.{guess}{' ' + hint if hint else ''}")

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self)

    def describe(self, name: str) -> str:
        """What the kind says about one entry (its ``describe`` function; else the entry's repr)."""
        entry = self.lookup(name)
        return self._describe(name, entry) if self._describe else f"{name}: {entry!r}"

    @property
    def broken(self) -> dict[str, str]:
        """Plug-ins that failed to load: name -> the message a lookup of it raises."""
        self.load_plugins()
        return dict(self._broken)

    # -- plug-ins from other packages ------------------------------------------------------------

    def load_plugins(self) -> None:
        """Register every plug-in of ``group`` once; one that fails is kept aside in ``broken``."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # before loading: a plug-in may look into its registry
        assert self.group is not None and self._adopt is not None
        seen: set[str] = set()
        for point in entry_points(group=self.group):
            if point.name in seen or point.name in self._entries:
                continue  # a second copy on the path, or a built-in's name: the first one wins
            seen.add(point.name)
            try:
                self._entries[point.name] = self._adopt(point.name, point.load())
                self._plugins.add(point.name)
            except Exception as err:  # noqa: BLE001  (any failure of someone else's code: reported, not raised)
                self._broken[point.name] = self._broken_message(point, err)

    def refresh_plugins(self) -> None:
        """Forget the plug-ins loaded so far; the next look looks for them again (after a
        package was installed or removed in this process)."""
        for name in self._plugins:
            self._entries.pop(name, None)
        self._plugins.clear()
        self._broken.clear()
        self._plugins_loaded = self.group is None

    def _broken_message(self, point: EntryPoint, err: Exception) -> str:
        dist = point.dist.name if point.dist is not None else "its distribution"
        reason = str(err) if isinstance(err, OcrrError) else f"{type(err).__name__}: {err}"
        return (
            f"{self.kind} plug-in {point.name!r} ({point.value}, from the package {dist}) did not load: "
            f"{reason.rstrip('.')}. Fix or upgrade {dist} (pip install --upgrade {dist}), "
            f"or remove it (pip uninstall {dist})."
        )
