"""The stored Merkle nodes over a ledger file's entries, read in the order a check needs them.

A check that reads entries one by one compares every node the tree completes with the one
stored for it. The tree completes each level's nodes in index order, so each level is read
by a statement of its own that walks that level in index order (the table's key), one node
behind the check: the check holds one row per level, not every stored node (which, kept in a
dict, took more memory than the chain hashes and the tree together). A stored node the
check passes without needing, or finds left at the end, is one no entry accounts for.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

__all__ = ["NodesInOrder"]

_END = (None, None)


class NodesInOrder:
    """The nodes stored in ``conn``'s file with ``idx >= (first >> level)``: every node over
    entries from ``first`` on. ``at(level, k)`` gives the stored hash of node ``(level, k)``
    (None: not stored), asked with ``k`` rising at each level; ``extra()`` names a stored node
    that no node asked for accounts for."""

    def __init__(self, conn: sqlite3.Connection, first: int) -> None:
        self.conn, self.first = conn, first
        self._rows: dict[int, Iterator[tuple]] = {}  # level -> its statement's remaining rows
        self._next: dict[int, tuple] = {}  # level -> its first stored (idx, hash) not yet passed
        self._asked: dict[int, int] = {}  # level -> the last idx asked for
        self._extra: dict[int, Any] = {}  # level -> the first stored idx passed without being asked for

    def at(self, level: int, k: int) -> object:
        """The stored hash of node (level, k), or None; stored nodes of that level before ``k``
        that were not asked for are remembered as extra."""
        if level not in self._rows:
            self._rows[level] = self._level(level)
            self._next[level] = next(self._rows[level], _END)
        idx, h = self._next[level]
        while idx is not None and idx < k:
            if idx != self._asked.get(level):
                self._extra.setdefault(level, idx)
            idx, h = self._next[level] = next(self._rows[level], _END)
        self._asked[level] = k
        return h if idx == k else None

    def extra(self) -> tuple[Any, Any] | None:  # (level, idx) as stored: ints in a file not edited
        """The first (level, idx), in that order, of a stored node that no node asked for
        accounts for: passed on the way, left after the last one asked for, or at a level never
        asked about (every distinct stored level is visited, whatever its value); or None."""
        level = self.conn.execute("SELECT min(level) FROM nodes").fetchone()[0]
        while level is not None:
            if level in self._extra:
                return level, self._extra[level]
            if level not in self._rows:
                idx = next(self._level(level), _END)[0]
            else:
                idx = self._next[level][0]
                if idx is not None and idx == self._asked[level]:  # (asked for: the one after it)
                    idx = next(self._rows[level], _END)[0]
            if idx is not None:
                return level, idx
            level = self.conn.execute("SELECT min(level) FROM nodes WHERE level > ?", (level,)).fetchone()[0]
        return None

    def _level(self, level: int) -> Iterator[tuple]:
        return iter(
            self.conn.execute(
                "SELECT idx, hash FROM nodes WHERE level = ? AND idx >= (? >> level) ORDER BY idx", (level, self.first)
            )
        )
