"""Import a JSONL export (``ocrr.ledger.transfer``'s format) into a new ledger file, atomically.

Import rebuilds a new durable ledger and refuses a file whose entries do not hash to
the chain and root its header (and each line) claim, or whose log is not the one a head
the caller holds describes (``expect_size``/``expect_root``, or a signed C2SP checkpoint
and its verifier key). It is atomic: the file is built in a temporary folder beside the
target, checked, fsynced and linked into place, so the target is either absent or
complete even if the process is killed; the next import removes a killed one's folder.
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.proofs import b64
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.transfer import (
    checked_header,
    checked_rows,
    expectations,
    fsync_folder,
    parse_entry,
    parse_line,
    read_export,
)
from ocrr.utils.files import move_into_new

__all__ = ["import_file"]

_CHUNK = 4096
_WORK = ".import-"  # the temporary folder beside the target: .<name>.import-<random>


def import_file(
    src: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    expect_size: int | None = None,
    expect_root: bytes | str | None = None,
    checkpoint: str | None = None,
    verifier_key: str | None = None,
) -> DurableLedger:
    """Create the durable ledger ``path`` from a JSONL export and check it hash for hash.

    The ledger is built beside ``path`` (in a temporary folder of the same directory),
    checked, fsynced and only then linked into place, so ``path`` is either absent or
    the complete ledger, whatever happens to this process; a refused import leaves
    nothing. ``expect_size``/``expect_root`` (bytes, hex or base64) or a signed C2SP
    ``checkpoint`` note with its ``verifier_key`` (from ``ocrr ledger keygen``) must
    describe the imported log exactly, else the import is refused. Returns the new
    ledger, open.
    """
    src, path = Path(src).expanduser(), Path(path).expanduser()
    want = expectations(expect_size, expect_root, checkpoint, verifier_key)
    _clean_stale(path)
    _check_target(path)
    work, lock = _workdir(path)
    try:
        built = work / "ledger.db"
        _build(src, built, want, path)
        _place(built, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(lock)  # after the folder is gone: an unlocked folder is always stale
    # Built and checked above, with a checkpoint at its full size: trust it up to there.
    return DurableLedger.open(path, verify="checkpoint")


def _check_target(path: Path) -> None:
    if path.exists():
        raise OcrrError(f"{path} already exists; import into a new file (ledgers are append-only)")
    if not path.parent.is_dir():
        raise OcrrError(f"cannot create ledger {path}: directory {path.parent} does not exist; create it first")
    for suffix in ("-wal", "-shm", "-journal"):
        side = Path(f"{path}{suffix}")
        if side.exists():  # SQLite would replay a stale journal into the new file
            raise OcrrError(
                f"{side} is left from a ledger that is no longer there; remove it (or import to another path)"
            )


def _workdir(path: Path) -> tuple[Path, int]:
    """A temporary folder beside ``path``, locked for as long as this import runs."""
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}{_WORK}", dir=path.parent))
    lock = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.fstat(lock).st_ino != work.stat().st_ino:  # pragma: no cover - removed before we locked it
        os.close(lock)
        raise OcrrError(f"the import's temporary folder {work} was removed meanwhile; run the import again")
    return work, lock


def _clean_stale(path: Path) -> None:
    """Remove the temporary folders of killed imports into ``path`` (unlocked: nobody runs them)."""
    for work in path.parent.glob(f".{glob.escape(path.name)}{_WORK}*"):
        try:
            lock = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(lock)
            continue  # an import running now
        shutil.rmtree(work, ignore_errors=True)
        os.close(lock)


def _build(src: Path, built: Path, want: list[tuple[str, int | None, bytes | None]], into: Path) -> None:
    """Import ``src`` into the new file ``built`` (to be placed at ``into``), check it, and leave
    it closed, on disk, alone."""
    with read_export(src, into) as lines:
        header = parse_line(next(lines, ""), src, 1)
        dim = checked_header(header, src, want)
        with DurableLedger.open(built, dim=dim) as ledger:
            lineno = 1
            batch: list[tuple] = []
            for line in lines:
                lineno += 1
                batch.append(parse_entry(parse_line(line, src, lineno), len(ledger) + len(batch), src, lineno))
                if len(batch) == _CHUNK:
                    _flush(ledger, batch, src, dim)
            _flush(ledger, batch, src, dim)
            if (
                len(ledger) != header.get("size")
                or b64(ledger.root()) != header.get("root")
                or b64(ledger.chain_head) != header.get("chain_head")
            ):
                raise OcrrError(
                    f"{src}: the imported entries do not give the size, root and chain head its "
                    "header records (lines missing or edited); the export is not trustworthy"
                )
            for what, size, root in want:
                if size is not None and len(ledger) != size:
                    raise OcrrError(f"{src} holds {len(ledger)} entries but {what} has {size}; import refused")
                if root is not None and ledger.root() != root:
                    raise OcrrError(
                        f"{src}: the root of its {len(ledger)} entries is {b64(ledger.root())}, but {what} "
                        f"has {b64(root)}: the entries differ from the log you expected (forged or another "
                        "log); import refused"
                    )
            ledger._record_checkpoint()  # what the reopening at the target trusts
    # Everything into the main file, which stays in WAL mode: the -wal goes when this last
    # connection closes, and opening the placed file changes nothing in its header (switching
    # the journal mode there would go through a rollback journal that a kill leaves hot, and a
    # hot journal makes the file unreadable to read-only checks until a writer opens it).
    with sqlite3.connect(built, isolation_level=None) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for side in ("-wal", "-shm"):
        if os.path.exists(f"{built}{side}"):  # pragma: no cover - SQLite removes them on the last close
            raise OcrrError(f"SQLite left {built}{side} after the import's last close; import again")
    fd = os.open(built, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _place(built: Path, path: Path) -> None:
    """Put the finished file at ``path`` in one step, never over an existing file; fsync the folder."""
    try:
        move_into_new(built, path)  # a file that appeared meanwhile stays; never two names at once
    except FileExistsError:
        raise OcrrError(
            f"{path} appeared while importing (another import or service?); import into a new file"
        ) from None
    fsync_folder(path.parent)


def _flush(ledger: DurableLedger, batch: list, src: Path, dim: int | None) -> None:
    if not batch:
        return
    first = len(ledger)
    try:
        vecs = np.stack([b[0] for b in batch])
    except ValueError:
        raise OcrrError(f"{src}: entries {first}..{first + len(batch) - 1} have vectors of different sizes") from None
    ledger.extend(checked_rows(vecs, dim, src, first), [b[1] for b in batch], [b[2] for b in batch])
    for j, b in enumerate(batch):
        if ledger.entry_hash(first + j) != b[3]:
            raise OcrrError(
                f"{src}: entry {first + j} does not hash to the value its line records "
                "(label, text, vector or an earlier entry edited)"
            )
    batch.clear()
