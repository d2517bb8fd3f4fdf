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
    "ocrr.persistent": "ocrr.systems.substrate.persistent",
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
    # systems by family
    "ocrr.systems.knn": "ocrr.systems.substrate.static",
    "ocrr.systems.bounded": "ocrr.systems.substrate.bounded",
    "ocrr.systems.robust_substrate": "ocrr.systems.substrate.robust",
    "ocrr.systems.persistent": "ocrr.systems.substrate.persistent",
    "ocrr.systems.consolidating": "ocrr.systems.hybrid.consolidating",
    "ocrr.systems.knn_lm": "ocrr.systems.hybrid.knn_lm",
    "ocrr.systems.mbpa": "ocrr.systems.hybrid.mbpa",
    "ocrr.systems.linear": "ocrr.systems.heads.linear",
    "ocrr.systems.continual": "ocrr.systems.heads.continual",
    "ocrr.systems.training": "ocrr.systems.heads.training",
    "ocrr.systems.lean_steps": "ocrr.systems.heads.lean_steps",
    "ocrr.systems.lora": "ocrr.systems.heads.lora",
    "ocrr.systems.refine": "ocrr.systems.heads.refine",
    "ocrr.systems.ocl_replay": "ocrr.systems.replay.ocl",
    "ocrr.systems.llm_icl": "ocrr.systems.llm.icl",
    "ocrr.systems.llm_backends": "ocrr.systems.llm.backends",
    "ocrr.systems.llm_cache": "ocrr.systems.llm.cache",
    "ocrr.systems.llm_openai": "ocrr.systems.llm.openai_backend",
    "ocrr.systems.llm_prompt": "ocrr.systems.llm.prompt",
    "ocrr.systems.river_systems": "ocrr.systems.river.classifiers",
    "ocrr.systems.river_mirror": "ocrr.systems.river.mirror",
    "ocrr.systems.llm_server": "tests.systems.llm_server (a test server in a source checkout: python -m tests.systems.llm_server)",
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
