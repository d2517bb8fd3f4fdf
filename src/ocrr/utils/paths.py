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


def cache_root_problem() -> str | None:
    """Why ``cache_root()`` cannot be the cache folder, in words naming the fix: it is, or lies
    under, a file. None when it can: a folder, or nothing yet where it will be created. (This
    layer raises no user errors: ``ocrr.data.locate.checked_cache_root`` raises this one.)"""
    root = cache_root()
    for candidate in (root, *root.parents):
        if candidate.exists():
            if candidate.is_dir():
                return None
            where = "is a file" if candidate == root else f"lies under the file {candidate}"
            if os.environ.get("OCRR_CACHE_DIR"):
                return (
                    f"OCRR_CACHE_DIR={os.environ['OCRR_CACHE_DIR']} names the cache folder, but {root} {where}; "
                    "point OCRR_CACHE_DIR at a folder (it is created if missing), or unset it to use the default cache"
                )
            source = "XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "HOME"
            return (
                f"the cache folder {root} (from {source}) {where}; move that file away, or set "
                "OCRR_CACHE_DIR to a folder for the cache"
            )
    return None
