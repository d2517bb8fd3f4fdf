"""File reads and writes that finish: atomic files (a file either exists complete or not at
all), and reads and writes at an offset that move every byte.

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

import numpy as np


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


_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def move_into_new(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move ``src`` to ``dst`` in one step, never over an existing file (FileExistsError then).

    Linux's ``renameat2(RENAME_NOREPLACE)`` does both at once, so no crash leaves the file
    under two names (a ledger with two hard links is refused: SQLite keys its log on the name).
    Where it is missing, a hard link then an unlink of ``src``; where links are missing too,
    a check then ``os.replace`` (racy, and said so by the caller's message)."""
    import ctypes
    import errno

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), os.fspath(dst))
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            raise OSError(err, os.strerror(err), os.fspath(dst))
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:
        if os.path.exists(dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst)) from None
        os.replace(src, dst)
        return
    os.unlink(src)


def write_at(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """All of ``data`` into the file ``fd`` at ``offset``: ``os.pwrite`` may write part of it (a
    buffer past the kernel's limit per call, a signal, a full disk's last bytes)."""
    with memoryview(data) as rest:
        rest = rest.cast("B")
        while rest:
            written = os.pwrite(fd, rest, offset)
            rest, offset = rest[written:], offset + written


READ_PIECE = 128 << 10  # bytes per read call in read_into


def read_into(fd: int, out: np.ndarray, offset: int) -> None:
    """Fill ``out`` (a contiguous array) from the file ``fd`` at ``offset``, ``READ_PIECE``
    bytes per call: a kernel built without preemption (a common default) lets no other task
    onto the core until a call returns. ``OSError`` if the file ends first."""
    with out.data.cast("B") as into:
        done = 0
        while done < len(into):
            got = os.preadv(fd, [into[done : done + READ_PIECE]], offset + done)
            if got <= 0:
                raise OSError(f"the file ended after {done} of {len(into)} bytes read at offset {offset}")
            done += got
