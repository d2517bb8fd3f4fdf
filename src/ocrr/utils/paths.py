"""Where ocrr keeps its user cache (datasets, embeddings)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$OCRR_CACHE_DIR, else $XDG_CACHE_HOME/ocrr, else ~/.cache/ocrr (not created here)."""
    if os.environ.get("OCRR_CACHE_DIR"):
        return Path(os.environ["OCRR_CACHE_DIR"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "ocrr"
    return Path.home() / ".cache" / "ocrr"
