"""Entries read back from storage, checked against what the ledger holds before anyone sees them.

Storage is untrusted: a row can be edited, removed or replaced behind the ledger's back by
anything that can write the file or the database. What the ledger holds in memory (each
entry's chain hash and the Merkle tree over the entries' leaves) was checked when it was
taken in, so every row read back for serving is compared with it: ``read_verified`` reads
rows ``lo..hi-1`` from any store, rebuilds each entry's canonical bytes from the stored
fields and checks that they hash to the held chain hash and to the held tree's leaf. Any
mismatch raises ``LedgerIntegrityError`` naming the first bad entry; nothing unchecked is
returned. The cost is two SHA-256 of the entry's bytes per entry read, no rehash of the log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from ocrr.errors import LedgerIntegrityError, LedgerStorageError
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import entry_bytes, leaf_hash

__all__ = ["EntryReader", "HeldLog", "VerifiedEntry", "read_verified"]


class EntryReader(Protocol):
    """Storage: rows (id, label, text, vector bytes, prev_hash, hash) in id order, unchecked."""

    def read_entries(self, lo: int, hi: int) -> Iterable[tuple]: ...


class HeldLog(Protocol):
    """What the ledger holds in memory: each entry's chain hash and the tree of their leaves."""

    tree: MerkleTree

    def __len__(self) -> int: ...

    def entry_hash(self, i: int) -> bytes: ...


class VerifiedEntry(NamedTuple):
    """One entry as stored, checked: its fields and ``bytes``, the canonical encoding
    (``ocrr.ledger.verify.entry_bytes``) that its chain hash and leaf hash cover."""

    id: int
    label: str
    text: str | None
    vector: bytes
    prev_hash: bytes
    bytes: bytes


def read_verified(store: EntryReader, held: HeldLog, lo: int, hi: int) -> list[VerifiedEntry]:
    """Entries ``lo``..``hi - 1`` (``hi`` at most what ``held`` holds) read from ``store``, each
    checked against ``held``; ``LedgerIntegrityError`` on the first that is missing or differs,
    ``LedgerStorageError`` when storage cannot be read at all."""
    if not 0 <= lo <= hi <= len(held):
        raise ValueError(f"entries {lo}..{hi - 1} are outside the {len(held)} the ledger holds")
    try:
        rows = list(store.read_entries(lo, hi))
    except (LedgerIntegrityError, LedgerStorageError):
        raise
    except Exception as e:  # noqa: BLE001 - the engine's own error (or its OcrrError): the core names no engine
        raise LedgerStorageError(
            f"entries {lo}..{hi - 1} could not be read from storage ({e}); check that the ledger's "
            "file or database is reachable and readable"
        ) from e
    out = [_checked(i, row, held) for i, row in enumerate(rows, lo)]
    if len(rows) != hi - lo:
        missing = lo + len(rows)
        raise LedgerIntegrityError(
            f"entry {missing} is missing from storage (entries were removed behind the ledger's back)", missing
        )
    return out


def _checked(i: int, row: tuple, held: HeldLog) -> VerifiedEntry:
    """Row ``i`` as read, if it is the entry the ledger holds at ``i``."""
    try:
        id_, label, text, vector, prev_hash, stored_hash = row
    except (TypeError, ValueError):
        raise LedgerIntegrityError(f"entry {i}: storage returned a malformed row", i) from None
    if id_ != i:  # rows come in id order: a larger id means entry i is gone
        raise LedgerIntegrityError(
            f"entry {i} is missing from storage (the next row read is {id_!r}: entries were removed "
            "behind the ledger's back)",
            i,
        )
    try:
        if not isinstance(label, str) or not (text is None or isinstance(text, str)):
            raise TypeError("label and text must be text")
        raw = entry_bytes(i, label, text, bytes(vector), bytes(prev_hash))
    except (TypeError, ValueError, UnicodeError) as e:  # ProofError is a ValueError
        raise LedgerIntegrityError(f"entry {i}: its stored fields are not an entry ({e})", i) from None
    held_hash = held.entry_hash(i)
    if hashlib.sha256(raw).digest() != held_hash or stored_hash != held_hash:
        raise LedgerIntegrityError(
            f"entry {i} in storage differs from the entry the ledger holds (edited behind the ledger's back)", i
        )
    if leaf_hash(raw) != held.tree.node(0, i):
        raise LedgerIntegrityError(f"entry {i} in storage does not hash to the leaf the ledger's tree holds", i)
    return VerifiedEntry(i, label, text, bytes(vector), bytes(prev_hash), raw)
