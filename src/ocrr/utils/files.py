"""Atomic file writes: a file either exists complete or not at all.

Results, caches and task markers are written to a temporary file in the same folder and
moved into place with ``os.replace``, so a crash or an interrupt never leaves half a file
that a later run would trust. The file gets the permissions any new file of this process
gets (0666 less the umask), like a plain ``open(path, "w")``: not mkstemp's 0600.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> Path:
    """Call ``write(tmp_path)``, then move the result to ``path``; the temporary file is
    removed if anything fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_file_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def _new_file_beside(path: Path) -> str:
    """Create an empty, uniquely named file next to ``path`` (mode 0666 less the umask)."""
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue
