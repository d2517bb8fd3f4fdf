"""The body of ``POST /add-checkpoint`` (c2sp.org/tlog-witness): ``old <size>``, up to 63
consistency proof hashes in base64, one per line, an empty line, then the signed checkpoint."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ocrr.errors import OcrrError
from ocrr.ledger.proofs import ProofError, unb64

__all__ = ["MAX_BODY", "MAX_PROOF", "AddCheckpoint", "BadRequest", "parse_add_checkpoint"]

MAX_PROOF = 63  # the spec's bound: a proof of a log below 2^63 entries needs no more
MAX_NOTE = 16 * 1024  # a checkpoint with its signature lines; real ones are a few hundred bytes
MAX_BODY = 64 * 1024  # the old line, the longest proof and the longest note, with room to spare
_OLD = re.compile(r"old (0|[1-9][0-9]{0,18})")
_MAX_SIZE = 2**63 - 1


class BadRequest(OcrrError):
    """A body that is not an add-checkpoint request (answered 400)."""


@dataclass(frozen=True)
class AddCheckpoint:
    old: int
    proof: list[bytes]
    checkpoint: str  # the signed note, as sent


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse an add-checkpoint body; BadRequest saying what is wrong with it."""
    if len(body) > MAX_BODY:
        raise BadRequest(f"request body over {MAX_BODY} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"request body is not UTF-8 (byte {e.start})") from None
    blank = text.find("\n\n")
    if blank < 0:
        raise BadRequest("no empty line before the checkpoint (c2sp.org/tlog-witness)")
    head, note = text[:blank].split("\n"), text[blank + 2 :]
    match = _OLD.fullmatch(head[0])
    if match is None or int(match[1]) > _MAX_SIZE:
        raise BadRequest(f"first line {head[0][:40]!r} is not `old <size>` (a decimal below 2^63, no leading zero)")
    lines = head[1:]
    if len(lines) > MAX_PROOF:
        raise BadRequest(f"{len(lines)} consistency proof lines, more than the {MAX_PROOF} allowed")
    proof = []
    for n, line in enumerate(lines, 1):
        try:
            raw = unb64(line)
        except ProofError:
            raw = b""
        if len(raw) != 32:
            raise BadRequest(f"consistency proof line {n} {line[:60]!r} is not one SHA-256 hash in base64")
        proof.append(raw)
    if len(note.encode()) > MAX_NOTE:
        raise BadRequest(f"checkpoint over {MAX_NOTE} bytes")
    return AddCheckpoint(int(match[1]), proof, note)
