"""Output paths checked at the door: before a command does any work, and before it creates anything.

A run that writes its results only at the end must not find out then that ``--out`` lies under a
file or in a folder it cannot write: the checks here raise one ``OcrrError`` naming the path and
the fix, and leave nothing behind.
"""

from __future__ import annotations

import os
from pathlib import Path

from ocrr.errors import OcrrError


def output_folder(path: Path, option: str | None = "--out") -> Path:
    """``path`` as a folder the command will create (with its parents) and write into: not a file,
    not under a file, and the nearest folder that exists is writable. ``option`` names it in errors."""
    named = _named(path, option)
    if path.exists() and not path.is_dir():
        raise OcrrError(f"{named} is a file, not a folder; choose a folder for the output")
    _writable(_nearest_existing(path, named), named)
    return path


def output_file(path: Path, option: str | None = "--out") -> Path:
    """``path`` as a file the command will write: not a folder, in a folder that exists and is writable."""
    named = _named(path, option)
    if path.is_dir():
        raise OcrrError(f"{named} is a folder; name the file to write in it, e.g. {path / 'out'}")
    folder = path.parent
    if not folder.is_dir():
        _nearest_existing(folder, named)  # a file on the way is the clearer message
        raise OcrrError(f"{named}: the folder {folder} does not exist; create it first (mkdir -p {folder})")
    _writable(folder, named)
    return path


def _named(path: Path, option: str | None) -> str:
    return f"{option} {path}" if option else str(path)


def _nearest_existing(path: Path, named: str) -> Path:
    """The first of ``path`` and its parents that exists; it must be a folder."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise OcrrError(f"{named}: {candidate} is a file, not a folder; choose another path")
            return candidate
    return Path(path.anchor or ".")


def _writable(folder: Path, named: str) -> None:
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OcrrError(f"{named}: cannot write in {folder} (permission denied); choose a folder you can write to")
