"""What every store's check says and the rules it checks rows by, whichever engine holds them.

``LedgerReport`` is the outcome of a check (truthy iff intact); ``Scan`` is what an intact
check read (every entry's columns and the tree rebuilt from them); ``Damage`` is raised
inside a check at the first problem and becomes a report naming the entry. ``check_entry``
(one stored entry: its link, stored hash and Merkle leaf), ``check_stored_rows`` (a run of
stored rows, gap-free ids from a given one) and ``check_checkpoint`` (a checkpoint record
against the tree) are the rules: each engine's scan (``ocrr.ledger.sqlite.scan``,
``ocrr.ledger.postgres.scan``) and the held ledger's take-in (``ocrr.ledger.held``) use
them, so a row is judged the same way wherever it comes from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ocrr.ledger.chain import GENESIS
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.proofs import b64
from ocrr.ledger.verify import entry_bytes, leaf_hash

__all__ = [
    "Damage",
    "LedgerReport",
    "Scan",
    "b64",
    "check_checkpoint",
    "check_entry",
    "check_stored_rows",
    "ok_report",
]


@dataclass(frozen=True)
class LedgerReport:
    """Outcome of checking a ledger file; truthy iff it is intact."""

    ok: bool
    size: int
    first_bad: int | None
    reason: str
    root: str | None = None  # base64, when ok (as in heads, proofs and checkpoints)
    chain_head: str | None = None
    checked_from: int = 0  # entries before this were vouched for by an authenticated checkpoint
    ignored_checkpoints: int = 0  # checkpoint records not authenticated (and so not used)
    ignored_why: tuple[str, ...] = ()  # why, for the first few

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict:
        return {**asdict(self), "ignored_why": list(self.ignored_why)}  # as JSON gives it back


class Damage(Exception):
    """The ledger is broken at ``first_bad``: raised inside a check, turned into a report."""

    def __init__(self, first_bad: int | None, reason: str):
        super().__init__(reason)
        self.first_bad, self.reason = first_bad, reason


@dataclass
class Scan:
    """What a scan read: the columns of every entry and the tree rebuilt from them."""

    dim: int | None
    labels: Sequence  # lists, or compact columns (ocrr.ledger.columns)
    texts: Sequence
    vectors: np.ndarray
    hashes: Sequence
    tree: MerkleTree
    checked_from: int = 0  # entries before it were not rehashed: an authenticated checkpoint vouched for them
    ignored_checkpoints: int = 0
    ignored_why: tuple[str, ...] = ()
    rows_checked: int = 0  # the rows of entries before it obey ocrr.ledger.rows.check_rows: checked as read


def check_entry(
    i: int, label: str, text: str | None, vec, prev_hash, digest, prev: bytes, dim: int, rehash: bool = True
) -> bytes | None:
    """Raise Damage unless stored entry ``i`` links to ``prev`` and (``rehash``) its stored
    hash matches its contents; return its Merkle leaf hash (None when not rehashed). The
    check of an opened file and of entries another process appended to it."""
    if not isinstance(vec, bytes) or len(vec) != 4 * dim:
        raise Damage(i, f"entry {i}: vector is not {4 * dim} bytes (dim {dim})")
    if prev_hash != prev:
        link = "the genesis value" if i == 0 else f"entry {i - 1}"
        raise Damage(i, f"entry {i}: prev_hash does not link to {link}")
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise Damage(i, f"entry {i}: stored hash is not 32 bytes")
    if not rehash:
        return None
    pre = entry_bytes(i, label, text, vec, prev_hash)
    if hashlib.sha256(pre).digest() != digest:
        raise Damage(i, f"entry {i}: stored hash does not match its contents (label, text or vector changed)")
    return leaf_hash(pre)


def check_stored_rows(
    rows: Iterable[tuple], start: int, prev: bytes, dim: int, trusted: int = 0
) -> Iterator[tuple[str, str | None, bytes, bytes, bytes]]:
    """Check stored rows ``(id, label, text, vector, prev_hash, hash[, stored leaf])``, in id
    order from ``start``, against the chain ending in ``prev``: gap-free ids, links, hashes
    and, when stored, leaves. Yields (label, text, vector, hash, Merkle leaf) per row; raises
    Damage at the first bad one. Rows before ``trusted`` are not rehashed: their stored leaf
    is taken (a checkpoint vouches for them). The check of every row a store takes in."""
    i = start
    for row in rows:
        id_, label, text, vec, prev_hash, digest = (_bytes(x) for x in row[:6])
        if type(id_) is not int or id_ != i:
            raise Damage(i, f"entry {i}: id is {id_!r}, expected {i} (an entry was dropped, duplicated or moved)")
        leaf = check_entry(i, label, text, vec, prev_hash, digest, prev, dim, rehash=i >= trusted)
        stored = _bytes(row[6]) if len(row) > 6 else None
        if leaf is None:  # not rehashed
            if not isinstance(stored, bytes) or len(stored) != 32:
                raise Damage(i, f"entry {i}: its stored Merkle leaf is not 32 bytes")
            leaf = stored
        elif stored is not None and stored != leaf:
            raise Damage(i, f"entry {i}: its stored Merkle leaf does not match its contents")
        yield label, text, vec, digest, leaf
        prev = digest
        i += 1


def _bytes(value):
    """A database's binary value (psycopg gives memoryview) as bytes; anything else as it is."""
    return bytes(value) if isinstance(value, memoryview) else value


def check_checkpoint(cp: tuple, tree: MerkleTree, chain_head: bytes | None) -> None:
    """Raise Damage unless the checkpoint record ``cp`` (size, chain head, root) matches the
    tree and the chain head of its size (None: past the end of the log)."""
    cp_size, cp_head, cp_root = cp
    if type(cp_size) is not int or not 0 < cp_size <= len(tree) or chain_head is None:
        raise Damage(
            min(len(tree), cp_size) if type(cp_size) is int else None,
            f"checkpoint of size {cp_size!r} lies past the end of the log ({len(tree)} entries): entries were removed",
        )
    if cp_head != chain_head or cp_root != tree.root(cp_size):
        raise Damage(
            cp_size - 1, f"checkpoint at size {cp_size} does not match the entries before it (history rewritten)"
        )


def ok_report(scan: Scan) -> LedgerReport:
    """The report of a ledger whose every entry checked out (any store)."""
    n = len(scan.hashes)
    return LedgerReport(
        True,
        n,
        None,
        f"ok: {n} entries, chain and Merkle tree intact",
        b64(scan.tree.root()),
        b64(scan.hashes[-1] if n else GENESIS),
        min(scan.checked_from, n),
        scan.ignored_checkpoints,
        scan.ignored_why,
    )
