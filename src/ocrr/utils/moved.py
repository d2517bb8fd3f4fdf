"""Old module paths of ocrr: one table says where each went, one import finder acts on it.

An entry is one of two kinds:

* ``moved(home)``: importing the old path fails with "X has moved: import <home> instead"
  (not a bare "No module named"). For modules whose names were split or reshaped, so code
  written against the old path could not run unchanged anyway.
* ``alias(home)``: the old path still imports, as the very module that holds its names now,
  with a ``DeprecationWarning`` naming the new path. For renames, so users' code keeps running
  meanwhile. An old *package* path gets a stand-in package: its names are the new package's,
  and its submodules are found through this table.

A key ending in ``.*`` covers the submodules of an old package whose own entry is missing: they
keep their names under the new package. A module that became a package of the same name (say
``ocrr.systems.substrate`` holding ``substrate/core.py``) needs no entry: its path still imports.

Installed by ``import ocrr`` at the front of ``sys.meta_path``: a folder an old package left
behind (a ``__pycache__`` that git does not remove) would otherwise import as an empty
namespace package. So an entry must never name a module that exists (tests/test_moved.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Home:
    """Where an old module path's names live now."""

    module: str  # the module that holds them
    note: str = ""  # where the rest went, when the old module was split
    still_imports: bool = False  # True: an alias with a DeprecationWarning; False: the import fails

    def __str__(self) -> str:
        return f"{self.module} ({self.note})" if self.note else self.module


def moved(module: str, note: str = "") -> Home:
    """The old path fails, naming ``module`` (and ``note``: where the rest of its names went)."""
    return Home(module, note)


def alias(module: str) -> Home:
    """The old path still imports as ``module``, with a DeprecationWarning naming it."""
    return Home(module, still_imports=True)


MOVED: dict[str, Home] = {
    "ocrr.experiment": moved("ocrr.engine.experiment"),
    "ocrr.runner": moved("ocrr.engine.runner"),
    "ocrr.results": moved("ocrr.engine.results"),
    "ocrr.metrics": moved("ocrr.protocols.summary", "held-out summaries: ocrr.protocols.heldout"),
    "ocrr.engine.metrics": moved("ocrr.protocols.summary", "held-out summaries: ocrr.protocols.heldout"),
    "ocrr.sweep": moved("ocrr.engine.sweep"),
    "ocrr.sweep.*": moved("ocrr.engine.sweep.*"),
    "ocrr.sweep.cmr_preset": moved("ocrr.studies.cmr_preset"),
    "ocrr.persistent": moved("ocrr.systems.substrate.persistent"),
    "ocrr.feedback": moved("ocrr.policies.feedback"),
    "ocrr.files": moved("ocrr.utils.files"),
    "ocrr.paths": moved("ocrr.utils.paths"),
    "ocrr.threads": moved("ocrr.utils.threads"),
    "ocrr.cli_progress": moved("ocrr.cli.progress"),
    "ocrr.calibrate_shift": moved("ocrr.studies.calibrate_shift"),
    "ocrr.scale": moved("ocrr.studies.scale.study"),
    "ocrr.scale_cli": moved("ocrr.cli.scale"),
    "ocrr.scale_data": moved("ocrr.studies.scale.data"),
    "ocrr.scale_ivf": moved("ocrr.studies.scale.ivf"),
    "ocrr.scale_memory": moved("ocrr.studies.scale.memory"),
    "ocrr.scale_real": moved("ocrr.studies.scale.real"),
    "ocrr.scale_report": moved("ocrr.studies.scale.report"),
    "ocrr.systems.vote": moved("ocrr.index.vote"),
    "ocrr.service.cli": moved("ocrr.cli.serve", "the service itself: ocrr.service.serve with a ServiceConfig"),
    "ocrr.service.workers": moved("ocrr.service.supervisor"),
    "ocrr.service.counters": moved("ocrr.service.metrics"),
    # ocrr.audit was the ledger's first name; its file's store and scan are the SQLite engine's now
    "ocrr.audit": alias("ocrr.ledger"),
    "ocrr.audit.merkle": alias("ocrr.ledger.merkle"),
    "ocrr.audit.verify": alias("ocrr.ledger.verify"),
    "ocrr.audit.heads": alias("ocrr.ledger.heads"),
    "ocrr.audit.scan": alias("ocrr.ledger.sqlite.scan"),
    "ocrr.audit.store": alias("ocrr.ledger.sqlite.store"),
    "ocrr.audit.transfer": alias("ocrr.ledger.location"),
    "ocrr.audit.cli": moved("ocrr.cli.ledger"),
    # systems by family: one subpackage per family
    "ocrr.systems.knn": alias("ocrr.systems.substrate.static"),
    "ocrr.systems.bounded": alias("ocrr.systems.substrate.bounded"),
    "ocrr.systems.robust_substrate": alias("ocrr.systems.substrate.robust"),
    "ocrr.systems.persistent": alias("ocrr.systems.substrate.persistent"),
    "ocrr.systems.consolidating": alias("ocrr.systems.hybrid.consolidating"),
    "ocrr.systems.knn_lm": alias("ocrr.systems.hybrid.knn_lm"),
    "ocrr.systems.mbpa": alias("ocrr.systems.hybrid.mbpa"),
    "ocrr.systems.linear": alias("ocrr.systems.heads.linear"),
    "ocrr.systems.continual": alias("ocrr.systems.heads.continual"),
    "ocrr.systems.training": alias("ocrr.systems.heads.training"),
    "ocrr.systems.lean_steps": alias("ocrr.systems.heads.lean_steps"),
    "ocrr.systems.lora": alias("ocrr.systems.heads.lora"),
    "ocrr.systems.refine": alias("ocrr.systems.heads.refine"),
    "ocrr.systems.ocl_replay": alias("ocrr.systems.replay.ocl"),
    "ocrr.systems.llm_icl": alias("ocrr.systems.llm.icl"),
    "ocrr.systems.llm_backends": alias("ocrr.systems.llm.backends"),
    "ocrr.systems.llm_cache": alias("ocrr.systems.llm.cache"),
    "ocrr.systems.llm_openai": alias("ocrr.systems.llm.openai_backend"),
    "ocrr.systems.llm_prompt": alias("ocrr.systems.llm.prompt"),
    "ocrr.systems.river_systems": alias("ocrr.systems.river.classifiers"),
    "ocrr.systems.river_mirror": alias("ocrr.systems.river.mirror"),
    "ocrr.systems.llm_server": moved(
        "tests.systems.llm_server", "a test server in a source checkout: python -m tests.systems.llm_server"
    ),
}


def new_home(name: str) -> Home | None:
    """Where an old module path lives now (None: it never existed)."""
    if name in MOVED:
        return MOVED[name]
    package, _, last = name.rpartition(".")
    while package:
        home = MOVED.get(package + ".*")
        if home is not None:
            return Home(home.module.replace("*", last), home.note, home.still_imports)
        package, _, child = package.rpartition(".")
        last = f"{child}.{last}"
    return None


def _deprecated(old: str, new: str) -> None:
    # stacklevel 3: past this function and the loader, to the user's import (the import
    # machinery's own frames are skipped by warnings)
    warnings.warn(f"{old} has moved: import {new} instead", DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as the module that holds its names now (a stand-in for a package)."""

    def __init__(self, old: str, home: str) -> None:
        self.old, self.home = old, home

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module = importlib.import_module(self.home)
        if hasattr(module, "__path__"):
            return None  # a package: a stand-in, so the new package's own submodules stay its own
        self.home_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        _deprecated(self.old, self.home)
        if module.__name__ == self.home:
            module.__spec__ = self.home_spec  # the import machinery gave it the alias's spec
            return
        package = importlib.import_module(self.home)
        module.__doc__ = f"Old name of {self.home} (deprecated)."
        module.__dict__["__getattr__"] = lambda name: getattr(package, name)
        module.__dict__["__dir__"] = lambda: dir(package)


class MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        home = new_home(fullname)
        if home is None:
            return None
        if not home.still_imports:
            raise ModuleNotFoundError(f"{fullname} has moved: import {home} instead.", name=fullname)
        spec = importlib.util.find_spec(home.module)
        is_package = spec is not None and spec.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(fullname, home.module), is_package=is_package)


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
