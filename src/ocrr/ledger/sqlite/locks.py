"""Locks on a ledger file itself, whatever name it is reached by.

SQLite keeps a database's write-ahead log and the index its writers lock beside the *name* the
file was opened by (``<name>-wal``, ``<name>-shm``). Two names for one file (a hard link, a bind
mount of the file, the file moved while open) give two logs and two writers that never see each
other: both append at the same ids and the ledger forks. So the writers' rule is keyed on the
file (its inode), not on a name:

* a file with more than one hard link is refused (``open_file``): each name would get its own log;
* every process writing the file holds, while it writes, a shared lock on one byte of the file
  chosen by the name it writes through (``join_writers``: the folder's device and inode and the
  file name, which decide the log SQLite uses). A process that comes through another name finds
  a lock elsewhere in that range and is refused; processes of one name (the workers of one
  ``ocrr serve``) share the file as before, and queue per commit on the ``-writer`` lock file;
* ``ocrr serve`` holds an exclusive lock on another byte for its life (``claim_service``): a
  second service on the file, by any name, is refused.

These are open-file-description locks (``F_OFD_SETLK``, Linux): they belong to a descriptor of
the file, not to a name or a process, and sit far past the bytes SQLite locks (its POSIX locks
are at 1 GiB, ``PENDING_BYTE``), so the two never meet. One descriptor per file per process
carries them (``_held``), kept open until the last holder in the process lets go: closing *any*
descriptor of a file drops every POSIX lock the process holds on it, SQLite's included
(https://sqlite.org/howtocorrupt.html, section 2.2). Without OFD locks (not Linux) only the
hard-link rule holds.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from ocrr.errors import OcrrError

__all__ = ["FileHold", "claim_service", "join_writers"]

_SERVE_BYTE = 1 << 40  # write-locked by the one ``ocrr serve`` of the file
_NAMES_AT, _NAMES_SPAN = 1 << 41, 1 << 40  # one byte per name writing the file, read-locked
# struct flock of 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (int), padding.
_FLOCK = struct.Struct("hhqqi4x")
_OFD = hasattr(fcntl, "F_OFD_SETLK") and struct.calcsize("l") == 8


@dataclass
class _OpenFile:
    """This process's one descriptor of a ledger file, and who in the process holds it."""

    fd: int
    holders: int = 0
    writers: int = 0
    name: bytes | None = None  # the name its writers write through (``_name_key``), while any
    serving: bool = False


_held: dict[tuple[int, int], _OpenFile] = {}
_guard = threading.Lock()


class FileHold:
    """One holder's share of a file's locks; ``release()`` lets go (idempotent)."""

    def __init__(self, key: tuple[int, int], writer: bool = False, serving: bool = False):
        self._key, self._writer, self._serving, self._released = key, writer, serving, False

    def release(self) -> None:
        with _guard:
            if self._released:
                return
            self._released = True
            held = _held[self._key]
            held.holders -= 1
            if self._serving:
                held.serving = False
                _unlock(held.fd, _SERVE_BYTE)
            if self._writer:
                held.writers -= 1
                if held.writers == 0 and held.name is not None:
                    _unlock(held.fd, _name_byte(held.name))
                    held.name = None
            _let_go(self._key, held)


def join_writers(path: Path) -> FileHold:
    """Hold the ledger file ``path`` (resolved, created if missing) as one of its writers;
    refuse, naming the fix, a file with several hard links or one that a process writes
    through another name. Call before SQLite opens the file."""
    name = _name_key(path)
    with _guard:
        key, held = _open_file(path, create=True)
        try:
            if held.writers and held.name != name:
                raise _another_name(path)
            if not held.writers and _OFD:
                at = _name_byte(name)
                _lock(held.fd, fcntl.F_RDLCK, at)
                if _locked(held.fd, _NAMES_AT, at) or _locked(held.fd, at + 1, _NAMES_AT + _NAMES_SPAN):
                    _unlock(held.fd, at)
                    raise _another_name(path)
            held.name = name
            held.writers += 1
            held.holders += 1
        finally:
            _let_go(key, held)
    return FileHold(key, writer=True)


def claim_service(path: Path) -> FileHold:
    """Hold the ledger file ``path`` (resolved, created if missing) as its one service; refuse,
    naming the fix, if another service holds it, by any name."""
    with _guard:
        key, held = _open_file(path, create=True)
        try:
            if held.serving:
                raise _served(path)
            if _OFD:
                try:
                    _lock(held.fd, fcntl.F_WRLCK, _SERVE_BYTE)
                except BlockingIOError:
                    raise _served(path) from None
            held.serving = True
            held.holders += 1
        finally:
            _let_go(key, held)
    return FileHold(key, serving=True)


def _open_file(path: Path, create: bool) -> tuple[tuple[int, int], _OpenFile]:
    """This process's descriptor of ``path`` (under ``_guard``; the caller ends with ``_let_go``)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and (st.st_dev, st.st_ino) in _held:  # never a second descriptor (see the module doc)
        key = (st.st_dev, st.st_ino)
        _check_links(path, os.fstat(_held[key].fd))
        return key, _held[key]
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
    except OSError as e:
        raise OcrrError(
            f"cannot open ledger {path} for writing ({e.strerror}); check that it is a file and that it "
            "and its folder are writable (`ocrr ledger verify` only reads)"
        ) from e
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    if key in _held:  # the name was moved onto a file this process holds meanwhile: keep its descriptor
        os.close(fd)
        fd = _held[key].fd
    try:
        _check_links(path, st)
    except OcrrError:
        if key not in _held:
            os.close(fd)
        raise
    return key, _held.setdefault(key, _OpenFile(fd))


def _let_go(key: tuple[int, int], held: _OpenFile) -> None:
    """Close the file's descriptor once nothing in this process holds it (under ``_guard``)."""
    if held.holders == 0 and _held.get(key) is held:
        del _held[key]
        os.close(held.fd)


def _check_links(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise OcrrError(f"ledger {path} is not a regular file; pass the path of a ledger file")
    if st.st_nlink > 1:
        raise OcrrError(
            f"ledger {path} has {st.st_nlink} names (hard links); SQLite keeps a write-ahead log beside each "
            f"name, so writers through two names would fork the ledger. Serve it through one name: remove the "
            f"other names (`find / -xdev -samefile {path}` lists them), or serve a copy"
        )


def _name_key(path: Path) -> bytes:
    """The name ``path`` is written through, as SQLite tells names apart: its folder (device and
    inode, the same through a bind mount of the folder) and the file name."""
    try:
        folder = os.stat(path.parent)
    except OSError as e:
        raise OcrrError(f"cannot open ledger {path}: its folder is not reachable ({e.strerror})") from e
    return f"{folder.st_dev}:{folder.st_ino}:".encode() + os.fsencode(path.name)


def _name_byte(name: bytes) -> int:
    return _NAMES_AT + int.from_bytes(hashlib.sha256(name).digest()[:8], "big") % _NAMES_SPAN


def _lock(fd: int, kind: int, at: int) -> None:
    """Take a lock of ``kind`` on byte ``at`` without waiting (BlockingIOError if held)."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, at, 1, 0))
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise BlockingIOError(e.errno, e.strerror) from None
        raise


def _unlock(fd: int, at: int) -> None:
    if _OFD:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_UNLCK, os.SEEK_SET, at, 1, 0))


def _locked(fd: int, lo: int, hi: int) -> bool:
    """Whether a descriptor other than ``fd`` holds a lock on bytes ``lo``..``hi - 1``."""
    if hi <= lo:
        return False
    got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, lo, hi - lo, 0))
    return _FLOCK.unpack(got)[0] != fcntl.F_UNLCK


def _another_name(path: Path) -> OcrrError:
    return OcrrError(
        f"ledger {path} is open for writing through another name for the same file (a bind mount, a "
        "hard link since removed, or the file moved while open); SQLite would keep a second write-ahead "
        "log there and the ledger would fork. Open it through the name its writers use, or stop them first"
    )


def _served(path: Path) -> OcrrError:
    return OcrrError(
        f"ledger {path} is already served by another `ocrr serve` through another name for the same file "
        "(a bind mount or a hard link); stop that one first, or serve another ledger file"
    )
