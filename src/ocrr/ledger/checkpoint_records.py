"""Checkpoint records: the checkpoints a ledger keeps in its own storage, as signed notes.

After a successful full check, a store that has a signing key records the checkpoint of
what it checked: a row (size, chain head, root, time) and its ``note``, the C2SP checkpoint
(c2sp.org/tlog-checkpoint) of that size signed by the key, with the chain head as an
extension line. Storage is untrusted input: a row counts only if its note verifies under a
key the reader trusts and says what the row's columns say. Only such an *authenticated*
checkpoint lets an open skip rehashing the entries before it, and only a mismatch between
one and the entries is damage. Any other row (no note: written before notes were, or by
hand; another key's; a note that says something else) is named in the report and
otherwise ignored.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, checkpoint_text, parse_signed_note, verify_checkpoint

__all__ = ["CHAIN_HEAD_LINE", "Records", "record_note", "sort_records"]

CHAIN_HEAD_LINE = "ocrr-chain-head "  # the extension line's prefix; base64 of the chain head follows
_NAMED = 10  # ignored rows named one by one in a report; the rest are counted
# Notes already verified, and what they say: a store's rows are read again by every check
# (the service's background check among them), and each verification costs about half a ms.
_VERIFIED_KEPT = 4096


def record_note(signer: Signer, size: int, root: bytes, chain_head: bytes) -> str:
    """The signed note kept with the checkpoint row of ``size``."""
    extension = f"{CHAIN_HEAD_LINE}{base64.b64encode(chain_head).decode('ascii')}\n"
    return signer.sign_note(checkpoint_text(signer.origin, size, root) + extension)


@dataclass(frozen=True)
class Records:
    """The checkpoint rows a scan read, sorted: ``authenticated`` (size, chain head, root),
    by size; how many were ignored and, for the first few, why."""

    authenticated: list[tuple[int, bytes, bytes]]
    ignored: int
    reasons: tuple[str, ...]


def sort_records(rows: Iterable[tuple], vkeys: Sequence[str]) -> Records:
    """Sort checkpoint rows (size, chain head, root, note) into authenticated ones (their note
    verifies under one of ``vkeys`` and matches the row) and ignored ones. ``vkeys`` empty:
    none is authenticated (said once, not per row)."""
    rows = list(rows)
    if not vkeys:
        if not rows:
            return Records([], 0, ())
        why = (
            f"{len(rows)} checkpoint record(s) not trusted: no verifier key given, so every entry was rehashed "
            "(give the ledger's verifier key: --vkey for `ocrr ledger verify`, --key for `ocrr serve`)"
        )
        return Records([], len(rows), (why,))
    good: list[tuple[int, bytes, bytes]] = []
    reasons: list[str] = []
    ignored = 0
    for size, chain_head, root, note in rows:
        problem = _problem(size, chain_head, root, note, vkeys)
        if problem is None:
            good.append((size, bytes(chain_head), bytes(root)))  # (checked to be bytes-like)
            continue
        ignored += 1
        if len(reasons) < _NAMED:
            reasons.append(f"checkpoint at size {size!r}: {problem}")
    if ignored > _NAMED:
        reasons.append(f"… and {ignored - _NAMED} more")
    good.sort()
    return Records(good, ignored, tuple(reasons))


def _problem(size, chain_head, root, note, vkeys: Sequence[str]) -> str | None:
    """Why a row is not an authenticated checkpoint (None: it is)."""
    if type(size) is not int or size < 1:
        return "its size is not a positive integer"
    if note is None:
        return "no signed note (recorded before checkpoints were signed, or written outside the ledger)"
    if not isinstance(note, str):
        return "its note is not text"
    failures = []
    for vkey in vkeys:
        signed = _signed(note, vkey)
        if isinstance(signed, str):
            failures.append(signed)
            continue
        if signed[2] is None:
            return "its note, signed by a trusted key, has no chain head line (not a checkpoint record)"
        if signed != (size, _as_bytes(root), _as_bytes(chain_head)):
            return "its size, root or chain head differs from what its signed note says (the row was edited)"
        return None
    return f"its note is not signed by a trusted key ({failures[0]})"


@lru_cache(maxsize=_VERIFIED_KEPT)
def _signed(note: str, vkey: str) -> tuple[int, bytes, bytes | None] | str:
    """What a record note signed by ``vkey`` says (size, root, chain head), or why it is not one."""
    try:
        _, size, root = verify_checkpoint(note, vkey)
    except OcrrError as e:
        return str(e)
    return size, root, _chain_head_of(note)


def _chain_head_of(note: str) -> bytes | None:
    """The chain head of a (verified) record note's extension line, or None."""
    text, _ = parse_signed_note(note)
    heads = [line[len(CHAIN_HEAD_LINE) :] for line in text.split("\n")[3:] if line.startswith(CHAIN_HEAD_LINE)]
    if len(heads) != 1:
        return None
    try:
        raw = base64.b64decode(heads[0], validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 and base64.b64encode(raw).decode("ascii") == heads[0] else None


def _as_bytes(value) -> bytes | None:
    # PostgreSQL returns bytea as memoryview; SQLite as bytes (or whatever an editor stored).
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
