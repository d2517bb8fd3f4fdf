"""Output paths checked at the door: before a command does any work, and before it creates anything.

A run that writes its results only at the end must not find out then that ``--out`` lies under a
file or in a folder it cannot write: the checks here raise one ``OcrrError`` naming the path and
the fix, and leave nothing behind. A command that reads a ledger and writes something else
(``ledger export``, ``ledger index``) checks with ``output_from_ledger`` that its output is
neither that ledger, nor one of its SQLite side files, nor any other SQLite file; the ledger
it reads is checked with ``ledger_to_read`` (a folder is not a ledger file).
"""

from __future__ import annotations

import argparse
import os
from itertools import islice
from pathlib import Path

from ocrr.errors import OcrrError


def output_path(text: str) -> Path:
    """An output option's value (argparse ``type=``): a path, never empty (``''`` reads as ``.``:
    the results would land in the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is empty, which would write into the current folder; name the output (e.g. results/run1), "
            "or drop the option for its default"
        )
    return Path(text)


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


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
LEDGER_SIDE_FILES = ("-wal", "-shm", "-journal", "-writer")  # beside a ledger file: SQLite's logs, its writer lock


def output_from_ledger(
    path: Path, ledger: str | os.PathLike[str], what: str, example: str, option: str = "--out"
) -> Path:
    """``path`` as a file written from the ledger at ``ledger`` (a file, or a database URL):
    ``output_file``'s checks, then not the ledger itself nor one of its side files (``L.db-wal``,
    ``-shm``, ``-journal``, ``-writer``): writing there destroys what is being read. An existing
    file is replaced, as before, unless it is an SQLite database: ``what`` (e.g. "the export") is
    never written over a ledger. ``example``: an output path to suggest instead."""
    from ocrr.ledger.location import is_database_url  # here: the other commands' outputs need no ledger

    output_file(path, option)
    named = _named(path, option)
    if not is_database_url(ledger):
        ledger = Path(ledger)
        names = {ledger, _resolved(ledger)}  # SQLite keeps the side files of a link beside its target
        for suffix in ("", *LEDGER_SIDE_FILES):
            if any(_same_file(path, Path(f"{name}{suffix}")) for name in names):
                role = "the ledger being read" if not suffix else f"the ledger {ledger}'s SQLite side file"
                raise OcrrError(
                    f"{named} is {role}: writing {what} there would destroy it; "
                    f"write {what} elsewhere, e.g. {option} {example}"
                )
    if is_sqlite_file(path):
        raise OcrrError(f"refusing to overwrite ledger {path} with {what}; pick another {option}, e.g. {example}")
    return path


def ledger_to_read(location: str | os.PathLike[str]) -> None:
    """Refuse a ledger location that is a folder (the scan would call it missing): name the
    ledger files in it, if any, as the fix."""
    from ocrr.ledger.location import is_database_url

    if is_database_url(location) or not Path(location).is_dir():
        return
    folder = Path(location)
    try:
        with os.scandir(folder) as entries:  # a glance, not a walk: a folder may hold millions of files
            ledgers = sorted(e.name for e in islice(entries, 1000) if e.is_file() and is_sqlite_file(Path(e.path)))
    except OSError:
        ledgers = []
    shown = ", ".join(str(folder / name) for name in ledgers[:5]) if ledgers else str(folder / "ledger.db")
    hint = f"the SQLite files in it: {shown}" if ledgers else f"e.g. {shown}"
    raise OcrrError(f"{folder} is a directory, not a ledger file; give the path of the ledger file itself ({hint})")


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same file on disk when both exist (links and
    all), else the same absolute path once the folders' links are resolved."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return _absolute(a) == _absolute(b)


def _absolute(path: Path) -> Path:
    return _resolved(path.parent) / path.name


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links
        return path.absolute()


def is_sqlite_file(path: Path) -> bool:
    """Whether ``path`` is a file that starts as an SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # missing, a folder, unreadable: not a database this command can see
        return False


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
