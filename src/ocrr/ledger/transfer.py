"""The export format: JSONL lines a ledger exports to and imports from, hash for hash.

Line 1 is a header: ``{"format": "ocrr-ledger-jsonl", "version": 1, "dim", "size",
"root", "chain_head"}``; then one line per entry, in id order: ``{"id", "label", "text",
"vector", "prev_hash", "hash"}``. Vectors are base64 of the little-endian float32 bytes,
hashes base64 too, so an entry's Merkle leaf can be recomputed from its line with
``ocrr.ledger.verify.entry_leaf_hash``. The same ledger always exports to the same bytes.

This module is the format, for every engine: ``lines_of`` writes it, ``write_export``
puts it in a file atomically, ``read_export`` opens one as text, ``parse_line``/
``parse_entry``/``checked_header``/``checked_rows`` read it back strictly, ``expectations``
turns what the caller holds (an expected size and root, or a signed C2SP checkpoint and its
verifier key) into the heads the imported log must match. Reading a ledger
(``ocrr.ledger.location.export_jsonl``) and building one (``ocrr.ledger.sqlite.transfer``,
``ocrr.ledger.postgres.transfer``) are the engines' part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.proofs import b64, unb64
from ocrr.ledger.rows import check_dim, check_rows
from ocrr.ledger.scan import LedgerReport, Scan

__all__ = [
    "FORMAT",
    "checked_header",
    "checked_rows",
    "expectations",
    "fsync_folder",
    "lines_of",
    "parse_entry",
    "parse_line",
    "read_export",
    "root_bytes",
    "write_export",
]

FORMAT = "ocrr-ledger-jsonl"
_SQLITE = b"SQLite format 3\x00"  # the first bytes of every SQLite file: a ledger, given for its export


def _dumps(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def lines_of(report: LedgerReport, scan: Scan) -> Iterator[str]:
    """The JSONL lines (with newlines) of an intact ledger: its check's report and what it read."""
    yield (
        _dumps(
            {
                "format": FORMAT,
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
                    "vector": b64(vec),
                    "prev_hash": b64(prev),
                    "hash": b64(scan.hashes[i]),
                }
            )
            + "\n"
        )
        prev = scan.hashes[i]


def write_export(lines: Iterator[str], out: str | os.PathLike[str]) -> int:
    """Write an export's ``lines`` to ``out`` (atomically, fsynced); return the entry count."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    n = -1
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line)
                n += 1
            f.flush()
            os.fsync(f.fileno())  # an export is a backup: on disk before it is named
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_folder(out.parent)
    return n


def expectations(
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
            raw = bytes.fromhex(text) if len(text) == 64 else unb64(text)
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


def fsync_folder(folder: Path) -> None:
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
    if header.get("format") != FORMAT or header.get("version") != 1:
        raise OcrrError(
            f"{src} is not an ocrr ledger export (its first line must be the "
            f"{FORMAT} v1 header); pass a file written by `ocrr ledger export`"
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


@contextmanager
def read_export(src: Path, into: Path | None) -> Iterator[Iterator[str]]:
    """The lines of the export ``src``, each read as UTF-8 text; the file is closed on leaving.
    A file that is not one is refused with one OcrrError naming the fix, not a decode error: a
    ledger file (an SQLite file, given where its export belongs; ``into``: the new ledger file
    the import makes, None for a database), or bytes that are not text (named by line)."""
    try:
        f = open(src, "rb")
    except OSError as e:
        raise OcrrError(f"cannot read {src} ({e}); pass a file written by `ocrr ledger export`") from e
    with f:
        if f.peek(len(_SQLITE))[: len(_SQLITE)] == _SQLITE:  # (peeked: a pipe cannot seek back)
            raise _a_ledger(src, into)
        yield _text_lines(f, src)


def _a_ledger(src: Path, into: Path | None) -> OcrrError:
    export = Path(f"{src}.jsonl") if src.suffix == ".jsonl" else src.with_suffix(".jsonl")
    copy = "" if into is None else f"to copy the ledger file, run `ocrr ledger migrate {src} {into}`; "
    return OcrrError(
        f"{src} is an SQLite file (a ledger?), not a ledger export (.jsonl): {copy}to import the ledger, export "
        f"it first (`ocrr ledger export {src} --out {export}`) and import that file"
    )


def _text_lines(f: BinaryIO, src: Path) -> Iterator[str]:
    # Decoded a line at a time (not by a text-mode file, which decodes ahead): a byte that is
    # not UTF-8 is named by its line.
    for lineno, raw in enumerate(f, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            why = f"byte {e.start + 1}: {e.reason}"
            if lineno == 1:
                raise OcrrError(
                    f"{src} is not a ledger export: its first line is not UTF-8 text ({why}); pass a file "
                    "written by `ocrr ledger export`"
                ) from None
            raise OcrrError(f"{src}:{lineno} is not UTF-8 text ({why}); the export was damaged or edited") from None
        yield line


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


def parse_line(line: str, src: Path, lineno: int) -> dict:
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


def parse_entry(obj: dict, expected_id: int, src: Path, lineno: int) -> tuple:
    """An entry line's (vector, label, text, hash), once its id is ``expected_id``."""
    try:
        if type(obj["id"]) is not int:  # not 1.0, true or "1": what another reader takes for an id
            raise ValueError(f"id {obj['id']!r} is not an integer")
        if obj["id"] != expected_id:
            raise ValueError(f"id {obj['id']!r}, expected {expected_id}")
        vec = np.frombuffer(unb64(obj["vector"]), "<f4")
        return (vec, obj["label"], obj.get("text"), unb64(obj["hash"]))
    except (KeyError, ValueError, TypeError) as e:
        raise OcrrError(f"{src}:{lineno} is not a valid entry ({e}); the export was edited") from None


def checked_rows(vecs: np.ndarray, dim: int | None, src: Path, first: int) -> np.ndarray:
    """The vectors of entries ``first..`` of an export, under the ledger's row rules (each
    error names the entry and its line: entry i is on line i + 2)."""
    return check_rows(vecs, dim, lambda j: f"{src}:{first + j + 2} (entry {first + j})", _IMPORT_FIX)


_IMPORT_FIX = "ocrr's doors take only these rows, so the export was not written by ocrr or was edited; import refused"
