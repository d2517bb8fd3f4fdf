"""Export a ledger file to JSONL and import it back, hash for hash.

Line 1 is a header: ``{"format": "ocrr-ledger-jsonl", "version": 1, "dim", "size",
"root", "chain_head"}``; then one line per entry, in id order: ``{"id", "label", "text",
"vector", "prev_hash", "hash"}``. Vectors are base64 of the little-endian float32 bytes,
hashes base64 too, so an entry's Merkle leaf can be recomputed from its line with
``ocrr.ledger.verify.entry_leaf_hash``. The same file always exports to the same bytes.
Import rebuilds a new durable ledger and refuses a file whose entries do not hash to
the chain and root its header (and each line) claim.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ocrr.errors import OcrrError
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.store import DurableLedger, scan_file

__all__ = ["export_jsonl", "import_jsonl"]

_FORMAT = "ocrr-ledger-jsonl"
_CHUNK = 4096


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")


def _dumps(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def export_lines(path: str | os.PathLike[str], verify: str = "full") -> Iterator[str]:
    """The JSONL lines (with newlines) of a ledger file; refuses a damaged file."""
    report, scan = scan_file(path, verify)
    if not report:
        where = "" if report.first_bad is None else f" at entry {report.first_bad}"
        raise OcrrError(f"ledger {path} is damaged{where}: {report.reason}; not exporting it")
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
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in export_lines(path, verify):
            f.write(line)
            n += 1
    os.replace(tmp, out)
    return n


def import_jsonl(src: str | os.PathLike[str], path: str | os.PathLike[str]) -> DurableLedger:
    """Create the durable ledger ``path`` from a JSONL export and check it hash for hash."""
    src, path = Path(src), Path(path)
    if path.exists():
        raise OcrrError(f"{path} already exists; import into a new file (ledgers are append-only)")
    try:
        f = open(src, encoding="utf-8")
    except OSError as e:
        raise OcrrError(f"cannot read {src} ({e}); pass a file written by `ocrr ledger export`") from e
    with f:
        header = _parse(f.readline(), src, 1)
        if header.get("format") != _FORMAT or header.get("version") != 1:
            raise OcrrError(
                f"{src} is not an ocrr ledger export (its first line must be the "
                f"{_FORMAT} v1 header); pass a file written by `ocrr ledger export`"
            )
        ledger = DurableLedger.open(path, dim=header.get("dim"))
        try:
            lineno = 1
            batch: list[tuple] = []
            for line in f:
                lineno += 1
                batch.append(_entry(_parse(line, src, lineno), len(ledger) + len(batch), src, lineno))
                if len(batch) == _CHUNK:
                    _flush(ledger, batch, src)
            _flush(ledger, batch, src)
            if (
                len(ledger) != header.get("size")
                or _b64(ledger.root()) != header.get("root")
                or _b64(ledger.chain_head) != header.get("chain_head")
            ):
                raise OcrrError(
                    f"{src}: the imported entries do not give the size, root and chain head its "
                    "header records (lines missing or edited); the export is not trustworthy"
                )
        except BaseException:
            ledger.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            raise
    return ledger


def _parse(line: str, src: Path, lineno: int) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise OcrrError(f"{src}:{lineno} is not valid JSON ({e.msg}); the export was cut or edited") from None
    if not isinstance(obj, dict):
        raise OcrrError(f"{src}:{lineno} is not a JSON object; the export was edited")
    return obj


def _entry(obj: dict, expected_id: int, src: Path, lineno: int) -> tuple:
    try:
        if obj["id"] != expected_id:
            raise ValueError(f"id {obj['id']!r}, expected {expected_id}")
        vec = np.frombuffer(base64.b64decode(obj["vector"], validate=True), "<f4")
        return (vec, obj["label"], obj.get("text"), base64.b64decode(obj["hash"], validate=True))
    except (KeyError, ValueError, TypeError) as e:
        raise OcrrError(f"{src}:{lineno} is not a valid entry ({e}); the export was edited") from None


def _flush(ledger: DurableLedger, batch: list, src: Path) -> None:
    if not batch:
        return
    first = len(ledger)
    try:
        vecs = np.stack([b[0] for b in batch])
    except ValueError:
        raise OcrrError(f"{src}: entries {first}..{first + len(batch) - 1} have vectors of different sizes") from None
    ledger.extend(vecs, [b[1] for b in batch], [b[2] for b in batch])
    for j, b in enumerate(batch):
        if ledger.entry_hash(first + j) != b[3]:
            raise OcrrError(
                f"{src}: entry {first + j} does not hash to the value its line records "
                "(label, text, vector or an earlier entry edited)"
            )
    batch.clear()
