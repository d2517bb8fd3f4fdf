"""The stored inner Merkle nodes under a quick open's checkpoint, compared after the open.

A quick open builds the tree from the stored leaves (the checkpoint's signed root vouches for
them) and, by default, compares every stored inner node with the one those leaves build. A
holder that checks the entries it took on trust after the open anyway (``ocrr serve
--workers N``: ``KnownPrefix.inner_nodes_later``) leaves this comparison to that pass too: it
answers and proves from the tree it built, never from the stored inner nodes, which matter
only to later readers of the file, and reading them lengthens a large ledger's restart.
``StoredInnerNodes`` makes the comparison a slice at a time, so that the pass can rest between
slices; a stored node that differs is reported as the open would have named it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ocrr.ledger.sqlite.prefix import stored_nodes
from ocrr.ledger.sqlite.schema import connect

__all__ = ["StoredInnerNodes"]

_HASH = 32
SLICE = 65_536  # nodes compared per statement


class StoredInnerNodes:
    """The stored nodes above the leaves over entries ``0..trusted-1`` of the file at ``path``,
    against ``levels`` (the tree those entries' leaves build: level l's nodes, 32 bytes each,
    as ``MerkleTree.levels`` holds them; at least ``trusted >> l`` of them)."""

    def __init__(self, path: str | os.PathLike[str], levels: Sequence[Any], trusted: int):
        self.path, self.levels, self.trusted = Path(path), levels, trusted
        self.count = sum(trusted >> level for level in range(1, len(levels)))  # nodes to compare

    def slices(self) -> Iterator[tuple[int, int, int]]:
        """(level, lo, hi): the comparison in slices of at most ``SLICE`` nodes."""
        for level in range(1, len(self.levels)):
            end = self.trusted >> level
            for lo in range(0, end, SLICE):
                yield level, lo, min(lo + SLICE, end)

    def first_mismatch(self, level: int, lo: int, hi: int) -> tuple[int, str] | None:
        """Compare stored nodes ``lo..hi-1`` of ``level`` with the tree's: None when each is
        there and equal, else the first entry under the first node missing or different, and the
        reason naming that node. Reads the file read-only."""
        expected = bytes(self.levels[level][lo * _HASH : hi * _HASH])
        conn = connect(self.path, readonly=True)
        try:
            if stored_nodes(conn, level, lo, hi) == expected:
                return None
            stored = dict(
                conn.execute("SELECT idx, hash FROM nodes WHERE level = ? AND idx >= ? AND idx < ?", (level, lo, hi))
            )
        except sqlite3.Error as e:
            return lo << level, f"the stored Merkle nodes of level {level} could not be read ({e})"
        finally:
            conn.close()
        k = next((i for i in range(lo, hi) if stored.get(i) != expected[(i - lo) * _HASH : (i - lo + 1) * _HASH]), lo)
        first = k << level
        return first, (
            f"Merkle node (level {level}, index {k}) over entries {first}..{first + (1 << level) - 1} is missing or "
            "does not match them"
        )
