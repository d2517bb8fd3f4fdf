"""Checkpoint records: the checkpoints a ledger keeps in its own storage, as signed notes.

After a successful check that rehashed every entry (a full check, or a quick open with no
record to start from), a store that has a signing key records the checkpoint of what it
checked: a row (size, chain head, root, time) and its ``note``, a C2SP signed note
by the key of ``ocrr-checkpoint-record-v1``, the origin, size, root and chain head. Its
first line keeps it from being read as a checkpoint (c2sp.org/tlog-checkpoint starts with
the origin): a record is no signed head, so a record written over a forked copy of the
storage can never be shown as a second root for a size the key signed.
Storage is untrusted input: a row counts only if its note verifies under a
key the reader trusts and says what the row's columns say. Only such an *authenticated*
checkpoint lets an open skip rehashing the entries before it, and only a mismatch between
one and the entries is damage. Any other row (no note: written before notes were, or by
hand; another key's; a note that says something else) is named in the report and
otherwise ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ocrr.errors import OcrrError
from ocrr.ledger.heads import Signer, check_origin, verify_note
from ocrr.ledger.proofs import ProofError, b64, unb64

__all__ = ["RECORD_TAG", "Records", "record_note", "sort_records"]

RECORD_TAG = "ocrr-checkpoint-record-v1"  # the note's first line
_NAMED = 10  # ignored rows named one by one in a report; the rest are counted
# Notes already verified, and what they say: a store's rows are read again by every check
# (the service's background check among them), and each verification costs about half a ms.
_VERIFIED_KEPT = 4096


def record_note(signer: Signer, size: int, root: bytes, chain_head: bytes) -> str:
    """The signed note kept with the checkpoint row of ``size``."""
    return signer.sign_note(f"{RECORD_TAG}\n{check_origin(signer.origin)}\n{size}\n{b64(root)}\n{b64(chain_head)}\n")


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
        if signed != (size, _as_bytes(root), _as_bytes(chain_head)):
            return "its size, root or chain head differs from what its signed note says (the row was edited)"
        return None
    return f"its note is not signed by a trusted key ({failures[0]})"


@lru_cache(maxsize=_VERIFIED_KEPT)
def _signed(note: str, vkey: str) -> tuple[int, bytes, bytes] | str:
    """What a record note signed by ``vkey`` says (size, root, chain head), or why it is not one."""
    try:
        text = verify_note(note, vkey)
    except OcrrError as e:
        return str(e)
    lines = text[:-1].split("\n")
    origin = vkey.split("+", 1)[0]
    if len(lines) != 5 or lines[0] != RECORD_TAG or lines[1] != origin:
        return f"its note, signed by a trusted key, is not a checkpoint record of {origin} ({RECORD_TAG})"
    size, root, chain_head = lines[2], _strict_hash(lines[3]), _strict_hash(lines[4])
    if not size.isdigit() or (size != "0" and size.startswith("0")) or root is None or chain_head is None:
        return "its note, signed by a trusted key, holds a malformed size or hash"
    return int(size), root, chain_head


def _strict_hash(text: str) -> bytes | None:
    """32 bytes from their canonical base64, or None."""
    try:
        raw = unb64(text)
    except ProofError:
        return None
    return raw if len(raw) == 32 else None


def _as_bytes(value) -> bytes | None:
    # PostgreSQL returns bytea as memoryview; SQLite as bytes (or whatever an editor stored).
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None
