"""Export a ledger file to JSONL and import it back, hash for hash.

Line 1 is a header: ``{"format": "ocrr-ledger-jsonl", "version": 1, "dim", "size",
"root", "chain_head"}``; then one line per entry, in id order: ``{"id", "label", "text",
"vector", "prev_hash", "hash"}``. Vectors are base64 of the little-endian float32 bytes,
hashes base64 too, so an entry's Merkle leaf can be recomputed from its line with
``ocrr.ledger.verify.entry_leaf_hash``. The same file always exports to the same bytes.
Import rebuilds a new durable ledger and refuses a file whose entries do not hash to
the chain and root its header (and each line) claim, or whose log is not the one a head
the caller holds describes (``expect_size``/``expect_root``, or a signed C2SP checkpoint
and its verifier key). It is atomic: the file is built in a temporary folder beside the
target, checked, fsynced and linked into place, so the target is either absent or
complete even if the process is killed; the next import removes a killed one's folder.
"""

from __future__ import annotations

import base64
import fcntl
import glob
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.location import display, scan_location
from ocrr.ledger.rows import check_dim, check_rows
from ocrr.ledger.store import DurableLedger

__all__ = ["export_jsonl", "import_jsonl"]

_FORMAT = "ocrr-ledger-jsonl"
_CHUNK = 4096
_WORK = ".import-"  # the temporary folder beside the target: .<name>.import-<random>


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _dumps(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def export_lines(path: str | os.PathLike[str], verify: str = "full") -> Iterator[str]:
    """The JSONL lines (with newlines) of a ledger (a file or a database URL); refuses a damaged one."""
    report, scan = scan_location(path, verify)
    if not report:
        where = "" if report.first_bad is None else f" at entry {report.first_bad}"
        raise OcrrError(f"ledger {display(path)} is damaged{where}: {report.reason}; not exporting it")
    assert scan is not None  # an intact report comes with what the scan read
    yield (
        _dumps(
            {
                "format": _FORMAT,
                "version": 1,
                "dim": scan.dim,
                "size": report.size,
                "root": report.root,
                "chain_head": report.chain_head,
            }
        )
        + "\n"
    )
    prev = GENESIS
    for i in range(report.size):
        vec = scan.vectors[i].astype("<f4").tobytes()
        yield (
            _dumps(
                {
                    "id": i,
                    "label": scan.labels[i],
                    "text": scan.texts[i],
                    "vector": _b64(vec),
                    "prev_hash": _b64(prev),
                    "hash": _b64(scan.hashes[i]),
                }
            )
            + "\n"
        )
        prev = scan.hashes[i]


def export_jsonl(path: str | os.PathLike[str], out: str | os.PathLike[str], verify: str = "full") -> int:
    """Write the JSONL export of ledger ``path`` to ``out`` (atomically); return the entry count."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    n = -1
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in export_lines(path, verify):
                f.write(line)
                n += 1
            f.flush()
            os.fsync(f.fileno())  # an export is a backup: on disk before it is named
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(out.parent)
    return n


def import_jsonl(
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
    want = _expectations(expect_size, expect_root, checkpoint, verifier_key)
    _clean_stale(path)
    _check_target(path)
    work, lock = _workdir(path)
    try:
        built = work / "ledger.db"
        _build(src, built, want)
        _place(built, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(lock)  # after the folder is gone: an unlocked folder is always stale
    # Built and checked above, with a checkpoint at its full size: trust it up to there.
    return DurableLedger.open(path, verify="checkpoint")


def _expectations(
    expect_size: int | None, expect_root: bytes | str | None, checkpoint: str | None, verifier_key: str | None
) -> list[tuple[str, int | None, bytes | None]]:
    """(what, size, root) pairs the imported log must match; the checkpoint's signature checked now."""
    want: list[tuple[str, int | None, bytes | None]] = []
    if expect_size is not None and (
        isinstance(expect_size, bool) or not isinstance(expect_size, int) or expect_size < 0
    ):
        raise OcrrError(f"--expect-size must be a whole number of entries, got {expect_size!r}")
    if expect_size is not None or expect_root is not None:
        want.append(("the expected head (--expect-size/--expect-root)", expect_size, root_bytes(expect_root)))
    if (checkpoint is None) != (verifier_key is None):
        raise OcrrError(
            "--checkpoint and --verifier-key go together: the signed checkpoint note and the verifier key "
            "(printed by `ocrr ledger keygen`) of the log it comes from"
        )
    if checkpoint is not None and verifier_key is not None:
        origin, size, root = verify_checkpoint(checkpoint, verifier_key)
        want.append((f"the checkpoint signed by {origin}", size, root))
    return want


def root_bytes(root: bytes | str | None) -> bytes | None:
    """A held head's root as given on the command line: 64 hex digits or base64 of 32 bytes."""
    if root is None or isinstance(root, bytes):
        raw = root
    else:
        text = root.strip()
        try:
            raw = bytes.fromhex(text) if len(text) == 64 else base64.b64decode(text, validate=True)
        except ValueError:
            raw = None
    if raw is not None and len(raw) != 32:
        raw = None
    if root is not None and raw is None:
        raise OcrrError(
            f"--expect-root {root!r} is not a SHA-256 root: give 64 hex digits or 44 base64 characters "
            "(as `ocrr ledger head` prints it)"
        )
    return raw


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


def _build(src: Path, built: Path, want: list[tuple[str, int | None, bytes | None]]) -> None:
    """Import ``src`` into the new file ``built``, check it, and leave it closed, on disk, alone."""
    try:
        f = open(src, encoding="utf-8")
    except OSError as e:
        raise OcrrError(f"cannot read {src} ({e}); pass a file written by `ocrr ledger export`") from e
    with f:
        header = _parse(f.readline(), src, 1)
        dim = checked_header(header, src, want)
        with DurableLedger.open(built, dim=dim) as ledger:
            lineno = 1
            batch: list[tuple] = []
            for line in f:
                lineno += 1
                batch.append(_entry(_parse(line, src, lineno), len(ledger) + len(batch), src, lineno))
                if len(batch) == _CHUNK:
                    _flush(ledger, batch, src, dim)
            _flush(ledger, batch, src, dim)
            if (
                len(ledger) != header.get("size")
                or _b64(ledger.root()) != header.get("root")
                or _b64(ledger.chain_head) != header.get("chain_head")
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
                        f"{src}: the root of its {len(ledger)} entries is {_b64(ledger.root())}, but {what} "
                        f"has {_b64(root)}: the entries differ from the log you expected (forged or another "
                        "log); import refused"
                    )
            ledger._record_checkpoint()  # what the reopening at the target trusts
    with sqlite3.connect(built, isolation_level=None) as conn:  # everything in the main file, no WAL left
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    fd = os.open(built, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _place(built: Path, path: Path) -> None:
    """Put the finished file at ``path`` in one step, never over an existing file; fsync the folder."""
    try:
        os.link(built, path)  # atomic and refuses to replace: a file that appeared meanwhile stays
    except FileExistsError:
        raise OcrrError(
            f"{path} appeared while importing (another import or service?); import into a new file"
        ) from None
    except OSError:  # a file system without hard links
        if path.exists():
            raise OcrrError(f"{path} appeared while importing; import into a new file") from None
        os.replace(built, path)
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a new name in ``folder`` durable (the file's own fsync does not cover its name)."""
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def checked_header(header: dict, src: Path, want: list[tuple[str, int | None, bytes | None]]) -> int | None:
    """The dimension an export's header line claims, once the header is one of ours and its
    size and dimension are bounded by what the file can hold (nothing is allocated for a
    claim before this); a size the caller expects must be the header's too."""
    if header.get("format") != _FORMAT or header.get("version") != 1:
        raise OcrrError(
            f"{src} is not an ocrr ledger export (its first line must be the "
            f"{_FORMAT} v1 header); pass a file written by `ocrr ledger export`"
        )
    size, dim = header.get("size"), header.get("dim")
    if type(size) is not int or size < 0:
        raise OcrrError(f"{src}:1: the header's size {size!r} is not a whole number of entries; the export was edited")
    held = src.stat().st_size  # every entry is a line of well over one byte
    if size > held:
        raise OcrrError(
            f"{src}:1: the header claims {size} entries but the file is {held} bytes long; the export was cut or edited"
        )
    if dim is not None or size:
        dim = check_dim(dim, f"{src}:1: the header")
    for what, expected, _ in want:  # refuse early what the header already shows; the entries decide later
        if expected is not None and size != expected:
            raise OcrrError(
                f"{src} holds {size} entries but {what} has {expected}: not the log you "
                "expected (an older or newer export, or a forged one)"
            )
    return dim


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's members, refusing a key given twice (another parser may read the other value)."""
    obj: dict = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"the key {key!r} appears twice")
        obj[key] = value
    return obj


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _parse(line: str, src: Path, lineno: int) -> dict:
    """One line of an export as a JSON object, strictly: no duplicate keys, no NaN or Infinity."""
    try:
        obj = json.loads(line, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise OcrrError(f"{src}:{lineno} is not valid JSON ({e.msg}); the export was cut or edited") from None
    except ValueError as e:
        raise OcrrError(f"{src}:{lineno} is not an export line ({e}); the export was edited") from None
    if not isinstance(obj, dict):
        raise OcrrError(f"{src}:{lineno} is not a JSON object; the export was edited")
    return obj


def _entry(obj: dict, expected_id: int, src: Path, lineno: int) -> tuple:
    try:
        if type(obj["id"]) is not int:  # not 1.0, true or "1": what another reader takes for an id
            raise ValueError(f"id {obj['id']!r} is not an integer")
        if obj["id"] != expected_id:
            raise ValueError(f"id {obj['id']!r}, expected {expected_id}")
        vec = np.frombuffer(base64.b64decode(obj["vector"], validate=True), "<f4")
        return (vec, obj["label"], obj.get("text"), base64.b64decode(obj["hash"], validate=True))
    except (KeyError, ValueError, TypeError) as e:
        raise OcrrError(f"{src}:{lineno} is not a valid entry ({e}); the export was edited") from None


def checked_rows(vecs: np.ndarray, dim: int | None, src: Path, first: int) -> np.ndarray:
    """The vectors of entries ``first..`` of an export, under the ledger's row rules (each
    error names the entry and its line: entry i is on line i + 2)."""
    return check_rows(vecs, dim, lambda j: f"{src}:{first + j + 2} (entry {first + j})", _IMPORT_FIX)


_IMPORT_FIX = "ocrr's doors take only these rows, so the export was not written by ocrr or was edited; import refused"


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
