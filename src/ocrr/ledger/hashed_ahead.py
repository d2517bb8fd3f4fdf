"""New entries hashed while the committing thread would otherwise wait on the database.

A group commit hashes its entries (the chain hash and the Merkle leaf of each) once it holds
the writers' lock: only then are their ids and the hash they chain on from known for sure.
On PostgreSQL the committer waits for the server twice per commit: for the lock, and for the
insert and ``COMMIT``. It spends those waits hashing instead, on a guess: the entries queued
then, chained on from the head this process holds (the lock's wait: the group about to be
written; the commit's wait: the next group). Once under the lock, ``take`` hands back
the guessed rows of the group's leading items that were hashed from exactly its ids and
previous hash; anything else (another writer committed first, an item failed its check, more
items came) is hashed again from there. The rows are a function of those inputs alone, so
a guess taken is the rows hashing them then would give (tests/ledger/test_hashed_ahead.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ocrr.ledger.chain import F4LE
from ocrr.ledger.group_commit import Pending
from ocrr.ledger.verify import encoded_entry_head, leaf_hash

__all__ = ["Hashed", "hash_items", "take"]


@dataclass(frozen=True)
class Hashed:
    """``items``' entries from id ``start``, chained on from ``prev``, as columns a store writes
    whole: each item's vectors (little-endian float32, row after row), each entry's label and
    text as UTF-8, its Merkle leaf and its chain hash."""

    start: int
    prev: bytes
    items: tuple[Pending, ...]
    vectors: list[bytes]
    labels: list[bytes]
    texts: list[bytes | None]
    leaves: list[bytes]
    digests: list[bytes]

    def chain(self) -> bytes:
        """``prev`` and the chain hashes, joined: entry k's previous hash is bytes 32k..32k+32,
        its own hash the 32 after."""
        return b"".join([self.prev, *self.digests])

    def extended(self, items: list[Pending]) -> Hashed:
        """This guess and ``items`` after it, hashed on from its last entry."""
        last = self.digests[-1] if self.digests else self.prev
        more = hash_items(items, self.start + len(self.digests), last)
        return Hashed(
            self.start,
            self.prev,
            self.items + more.items,
            self.vectors + more.vectors,
            self.labels + more.labels,
            self.texts + more.texts,
            self.leaves + more.leaves,
            self.digests + more.digests,
        )

    def first(self, items: int, entries: int) -> Hashed:
        """The leading ``items`` (holding ``entries`` entries) alone."""
        return Hashed(
            self.start,
            self.prev,
            self.items[:items],
            self.vectors[:items],
            self.labels[:entries],
            self.texts[:entries],
            self.leaves[:entries],
            self.digests[:entries],
        )


def hash_items(items: list[Pending], start: int, prev: bytes) -> Hashed:
    """Hash ``items``' entries from id ``start``, chained on from ``prev``."""
    vectors, labels, texts, leaves, digests = [], [], [], [], []
    n, first = start, prev
    sha256 = hashlib.sha256
    for p in items:
        blob = p.vecs.astype(F4LE, copy=False).tobytes()  # every row's bytes at once, sliced below
        vectors.append(blob)
        width = len(blob) // len(p.labels)
        with memoryview(blob) as rows:
            for j, (label, text) in enumerate(zip(p.labels, p.texts)):
                lab, txt = label.encode("utf-8"), None if text is None else text.encode("utf-8")
                pre = b"".join((encoded_entry_head(n, lab, txt, width // 4), rows[j * width : (j + 1) * width], prev))
                prev, n = sha256(pre).digest(), n + 1
                labels.append(lab)
                texts.append(txt)
                leaves.append(leaf_hash(pre))
                digests.append(prev)
    return Hashed(start, first, tuple(items), vectors, labels, texts, leaves, digests)


def take(guess: Hashed | None, items: list[Pending], start: int, prev: bytes) -> Hashed:
    """``items``' entries hashed from id ``start`` on from ``prev``: the guess's rows for the
    leading items it hashed from exactly there, the rest hashed now."""
    if guess is None or guess.start != start or guess.prev != prev:
        return hash_items(items, start, prev)
    same, count = 0, 0
    for mine, guessed in zip(items, guess.items):
        if mine is not guessed:
            break
        same, count = same + 1, count + len(mine.labels)
    if same == len(items) == len(guess.items):
        return guess  # it hashed exactly these items
    kept = guess.first(same, count)
    return kept.extended(items[same:]) if same < len(items) else kept
