"""Old module paths of ocrr fail with a message naming the new one (not a bare "No module named").

Installed by ``import ocrr`` at the end of ``sys.meta_path``, so it is asked only about names
nothing else found. ``ocrr.audit.X`` is different: an alias that still imports (ocrr/audit).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "ocrr.experiment": "ocrr.engine.experiment",
    "ocrr.runner": "ocrr.engine.runner",
    "ocrr.results": "ocrr.engine.results",
    "ocrr.metrics": "ocrr.protocols.summary (held-out summaries: ocrr.protocols.heldout)",
    "ocrr.engine.metrics": "ocrr.protocols.summary (held-out summaries: ocrr.protocols.heldout)",
    "ocrr.sweep": "ocrr.engine.sweep",
    "ocrr.sweep.cmr_preset": "ocrr.studies.cmr_preset",
    "ocrr.persistent": "ocrr.systems.persistent",
    "ocrr.feedback": "ocrr.policies.feedback",
    "ocrr.files": "ocrr.utils.files",
    "ocrr.paths": "ocrr.utils.paths",
    "ocrr.threads": "ocrr.utils.threads",
    "ocrr.cli_progress": "ocrr.cli.progress",
    "ocrr.calibrate_shift": "ocrr.studies.calibrate_shift",
    "ocrr.scale": "ocrr.studies.scale.study",
    "ocrr.scale_cli": "ocrr.cli.scale",
    "ocrr.scale_data": "ocrr.studies.scale.data",
    "ocrr.scale_ivf": "ocrr.studies.scale.ivf",
    "ocrr.scale_memory": "ocrr.studies.scale.memory",
    "ocrr.scale_real": "ocrr.studies.scale.real",
    "ocrr.scale_report": "ocrr.studies.scale.report",
    "ocrr.systems.vote": "ocrr.index.vote",
    "ocrr.service.cli": "ocrr.cli.serve (the service itself: ocrr.service.serve with a ServiceConfig)",
    "ocrr.service.workers": "ocrr.service.supervisor",
    "ocrr.service.counters": "ocrr.service.metrics",
    "ocrr.audit.cli": "ocrr.cli.ledger",
}


def new_home(name: str) -> str | None:
    """Where an old module path lives now (None: it never existed)."""
    if name in MOVED:
        return MOVED[name]
    if name.startswith("ocrr.sweep."):
        return "ocrr.engine.sweep." + name[len("ocrr.sweep.") :]
    return None


class MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        home = new_home(fullname)
        if home is not None:
            raise ModuleNotFoundError(f"{fullname} has moved: import {home} instead.", name=fullname)
        return None


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
