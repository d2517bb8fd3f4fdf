"""An append-only RFC 6962 Merkle tree that keeps every complete subtree hash.

``levels[l]`` holds, 32 bytes each, the hash of every *complete* subtree of 2**l leaves
(node k covers leaves [k * 2**l, (k + 1) * 2**l)). Appending a leaf adds it to level 0
and, while a level has an even count, the parent of its last two nodes: one hash per
append on average. Any root, inclusion proof or consistency proof of any size <= the
current size is then assembled from stored nodes in O(log n) hashes, never by rehashing
the log. Memory: about 64 bytes per leaf.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from ocrr.ledger.verify import EMPTY_ROOT, HASH_SIZE, node_hash

__all__ = ["MerkleTree"]

_NODE = hashlib.sha256(b"\x01")  # a node hashes 0x01 || left || right: start from this state


def _node(pair: bytes | bytearray) -> bytes:
    """node_hash(left, right) of the 64 bytes ``left || right``."""
    h = _NODE.copy()
    h.update(pair)
    return h.digest()


def _node_of_pair(pair: memoryview) -> bytes:
    """``node_hash`` of two adjacent nodes, given as their 64 concatenated bytes."""
    return hashlib.sha256(b"\x01" + pair).digest()


def _split(n: int) -> int:
    """Largest power of two strictly below n (n >= 2): RFC 6962's k."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    def __init__(self) -> None:
        self.levels: list[bytearray] = [bytearray()]

    @classmethod
    def from_leaves(cls, leaves: bytes) -> MerkleTree:
        """The tree of these leaf hashes (32 bytes each, concatenated): the same levels as
        appending them one by one, built a level at a time (no per-append bookkeeping)."""
        if len(leaves) % HASH_SIZE:
            raise ValueError(f"leaf hashes are {HASH_SIZE} bytes each, got {len(leaves)} bytes")
        tree = cls()
        level = bytearray(leaves)
        tree.levels = [level]
        pair = 2 * HASH_SIZE
        while len(level) >= pair:
            below = memoryview(level)
            level = bytearray(
                b"".join([_node_of_pair(below[j : j + pair]) for j in range(0, len(level) // pair * pair, pair)])
            )
            tree.levels.append(level)
        return tree

    def __len__(self) -> int:
        return len(self.levels[0]) // HASH_SIZE

    def node(self, level: int, k: int) -> bytes:
        return bytes(self.levels[level][k * HASH_SIZE : (k + 1) * HASH_SIZE])

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add one leaf hash; return the nodes it completed as (level, index, hash),
        leaf first (what a store writes beside the entry)."""
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
        out = [(0, len(self), bytes(leaf))]
        self.levels[0] += leaf
        level = 0
        while (len(self.levels[level]) // HASH_SIZE) % 2 == 0:
            k = len(self.levels[level]) // HASH_SIZE - 1
            parent = node_hash(self.node(level, k - 1), self.node(level, k))
            if level + 1 == len(self.levels):
                self.levels.append(bytearray())
            self.levels[level + 1] += parent
            out.append((level + 1, k // 2, parent))
            level += 1
        return out

    def extend(self, leaves: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
        """``append`` of each of ``leaves`` in turn, with the same nodes returned in the same
        order; one call for a group commit's leaves, so the per-leaf work is a few local
        operations instead of method calls."""
        out: list[tuple[int, int, bytes]] = []
        levels, size = self.levels, HASH_SIZE
        for leaf in leaves:
            if len(leaf) != size:
                raise ValueError(f"a leaf hash is {size} bytes, got {len(leaf)}")
            nodes = levels[0]
            count = len(nodes) // size
            out.append((0, count, bytes(leaf)))
            nodes += leaf
            count += 1
            level = 0
            while not count & 1:  # the level's last two nodes are complete siblings: add their parent
                parent = _node(nodes[-2 * size :])
                if level + 1 == len(levels):
                    levels.append(bytearray())
                nodes = levels[level + 1]
                nodes += parent
                count = len(nodes) // size
                level += 1
                out.append((level, count - 1, parent))
        return out

    def truncate(self, size: int) -> None:
        """Forget every leaf from ``size`` on (a failed write is undone this way)."""
        for level, nodes in enumerate(self.levels):
            del nodes[(size >> level) * HASH_SIZE :]

    # -- hashes of ranges ------------------------------------------------------------
    def _range(self, lo: int, hi: int, memo: dict) -> bytes:
        """MTH(D[lo:hi]) for the ranges RFC 6962's recursion visits (lo is a multiple of
        a power of two >= hi - lo). Complete ranges are stored; the others are the
        right edge of a smaller tree, memoised so one proof hashes each at most once."""
        n = hi - lo
        if n & (n - 1) == 0:
            return self.node(n.bit_length() - 1, lo // n)
        got = memo.get((lo, hi))
        if got is None:
            k = _split(n)
            got = memo[(lo, hi)] = node_hash(self._range(lo, lo + k, memo), self._range(lo + k, hi, memo))
        return got

    def _check(self, size: int, what: str) -> int:
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= len(self):
            raise IndexError(f"{what} {size!r} is outside 0..{len(self)} (the log's size)")
        return size

    def root(self, size: int | None = None) -> bytes:
        size = len(self) if size is None else self._check(size, "tree size")
        return EMPTY_ROOT if size == 0 else self._range(0, size, {})

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 6962 2.1.1 PATH(index, D[0:size])."""
        size = len(self) if size is None else self._check(size, "tree size")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            raise IndexError(f"entry {index!r} is outside a log of size {size}")
        memo: dict = {}
        proof: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:  # walk down; siblings are collected top-down, returned bottom-up
            k = _split(hi - lo)
            if index < lo + k:
                proof.append(self._range(lo + k, hi, memo))
                hi = lo + k
            else:
                proof.append(self._range(lo, lo + k, memo))
                lo += k
        return proof[::-1]

    def inclusion_proofs(
        self, indices: Sequence[int], size: int | None = None, encode: Callable[[bytes], Any] = bytes
    ) -> list[list[Any]]:
        """``inclusion_proof(i, size)`` for every ``i`` of ``indices``, made together. Entries
        under one node share the upper part of their proofs: level by level from the top, each
        node the entries reach gets its path up (its sibling, then its parent's path), so
        every sibling is looked up once (a stored node or, on the right edge, the hash of an
        incomplete subtree, computed once for all of them) and a group commit's proofs cost a
        few list joins per node instead of a step per entry and level. ``encode``: what each
        node is handed out as, called once per distinct node (``b64`` for JSON documents)."""
        size = len(self) if size is None else self._check(size, "tree size")
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
                raise IndexError(f"entry {index!r} is outside a log of size {size}")
        reached = [dict.fromkeys(indices)]  # per level, bottom-up: the nodes the entries are under
        lasts = [size - 1]  # per level: the index of its last (maybe incomplete) node
        while lasts[-1] > 0:
            reached.append(dict.fromkeys(k >> 1 for k in reached[-1]))
            lasts.append(lasts[-1] >> 1)
        memo: dict = {}
        above: dict[int, list[Any]] = dict.fromkeys(reached[-1], [])  # the root's path up: none
        for level in range(len(lasts) - 2, -1, -1):
            nodes, width, last = self.levels[level], 1 << level, lasts[level]
            paths = {}
            for k in reached[level]:
                sib, up = k ^ 1, above[k >> 1]
                if sib > last:  # an even last node: its own parent (RFC 6962's unbalanced right edge)
                    paths[k] = up
                elif (sib + 1) * width <= size:  # a complete subtree: stored
                    paths[k] = [encode(bytes(nodes[sib * HASH_SIZE : (sib + 1) * HASH_SIZE])), *up]
                else:
                    paths[k] = [encode(self._range(sib * width, size, memo)), *up]
            above = paths
        return [list(above[i]) for i in indices]  # one list each (paths share their parts)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """RFC 6962 2.1.2 PROOF(size1, D[0:size2]); empty when size1 == size2, and from the
        empty tree (RFC 9162 2.1.4: every tree is consistent with it)."""
        size2 = len(self) if size2 is None else self._check(size2, "tree size")
        self._check(size1, "old size")
        if not 0 <= size1 <= size2:
            raise IndexError(f"a consistency proof needs 0 <= old size <= new size, got {size1} and {size2}")
        if size1 == 0:
            return []
        memo: dict = {}
        proof: list[bytes] = []
        lo, hi, m, whole = 0, size2, size1, True  # whole: D[lo:hi]'s old part is the old tree itself
        while m != hi - lo:
            k = _split(hi - lo)
            if m <= k:
                proof.append(self._range(lo + k, hi, memo))
                hi = lo + k
            else:
                proof.append(self._range(lo, lo + k, memo))
                lo, m, whole = lo + k, m - k, False
        if not whole:
            proof.append(self._range(lo, hi, memo))
        return proof[::-1]
