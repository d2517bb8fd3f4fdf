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

__all__ = ["MerkleTree", "each_node"]

_CHUNK = 32_768 * HASH_SIZE  # bytes of parents ``from_leaves`` builds at a time
_NODE = hashlib.sha256(b"\x01")  # a node hashes 0x01 || left || right: start from this state


def _node(pair: bytes | bytearray | memoryview) -> bytes:
    """node_hash(left, right) of the 64 bytes ``left || right``."""
    h = _NODE.copy()
    h.update(pair)
    return h.digest()


def _split_nodes(joined: bytes) -> list[bytes]:
    """The 32-byte nodes of ``joined``, in order."""
    return [joined[j : j + HASH_SIZE] for j in range(0, len(joined), HASH_SIZE)]


def each_node(encode: Callable[[bytes], Any]) -> Callable[[bytes], list[Any]]:
    """An ``encode_all`` that calls ``encode`` on each node."""
    return lambda joined: [encode(node) for node in _split_nodes(joined)]


def _split(n: int) -> int:
    """Largest power of two strictly below n (n >= 2): RFC 6962's k."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    def __init__(self) -> None:
        self.levels: list[bytearray] = [bytearray()]

    @classmethod
    def from_leaves(cls, leaves: bytes | bytearray, *, own: bool = False) -> MerkleTree:
        """The tree of these leaf hashes (32 bytes each, concatenated): the same levels as
        appending them one by one, built a level at a time (no per-append bookkeeping).
        ``own``: ``leaves`` is a bytearray the tree takes as its first level, not a copy (a
        caller that read them for this tree alone need not hold them twice)."""
        if len(leaves) % HASH_SIZE:
            raise ValueError(f"leaf hashes are {HASH_SIZE} bytes each, got {len(leaves)} bytes")
        if not own:
            level = bytearray(leaves)
        elif isinstance(leaves, bytearray):
            level = leaves
        else:
            raise TypeError("from_leaves(own=True) takes a bytearray")
        tree = cls()
        tree.levels = [level]
        pair = 2 * HASH_SIZE
        while len(level) >= pair:
            parents = bytearray(len(level) // pair * HASH_SIZE)
            # A chunk of parents at a time: a list of every parent's bytes object would take
            # about twice the level's own bytes at once (at 10M leaves, hundreds of MB).
            with memoryview(level) as below, memoryview(parents) as out:
                for lo in range(0, len(parents), _CHUNK):
                    hi = min(lo + _CHUNK, len(parents))
                    out[lo:hi] = b"".join([_node(below[j : j + pair]) for j in range(2 * lo, 2 * hi, pair)])
            tree.levels.append(parents)
            level = parents
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
        """``append`` of each of ``leaves`` in turn, for a group commit's leaves at once: the
        same levels, and the same nodes as runs ``(level, first index, their hashes joined)``,
        level by level (the leaves first, then the parents they completed); a store writes
        each run as one value, not a row per node. Built a level at a time, as ``from_leaves``
        does: one pass per level over the pairs the new leaves completed."""
        wrong = set(map(len, leaves)) - {HASH_SIZE}
        if wrong:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {min(wrong)}")
        levels, pair = self.levels, 2 * HASH_SIZE
        first = len(levels[0]) // HASH_SIZE  # the first new node's index, on each level in turn
        joined = b"".join(leaves)
        out = [(0, first, joined)] if joined else []
        levels[0] += joined
        level = 0
        while True:
            nodes = levels[level]
            # the parents of the pairs completed now: from the new nodes' first one's, to the last whole pair's
            lo, hi = first >> 1, len(nodes) // pair
            if lo >= hi:
                return out
            if level + 1 == len(levels):
                levels.append(bytearray())
            # the pairs' bytes, sliced once (a level may be a bytearray or a shared prefix and its own bytes)
            with memoryview(nodes[lo * pair : hi * pair]) as pairs:
                parents = b"".join([_node(pairs[j : j + pair]) for j in range(0, len(pairs), pair)])
            levels[level + 1] += parents
            level, first = level + 1, lo
            out.append((level, lo, parents))

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
        """``inclusion_proof(i, size)`` for every ``i`` of ``indices``, made together
        (``leaves_and_proofs``); ``encode``: what each node is handed out as, called once per
        distinct node."""
        return self.leaves_and_proofs(indices, size, each_node(encode))[1]

    def leaves_and_proofs(
        self,
        indices: Sequence[int],
        size: int | None = None,
        encode_all: Callable[[bytes], Sequence[Any]] | None = None,
    ) -> tuple[list[Any], list[list[Any]]]:
        """The leaf hash and ``inclusion_proof(i, size)`` of every ``i`` of ``indices``, made
        together. Entries under one node share the upper part of their proofs: level by level
        from the top, each node the entries reach gets its path up (its sibling, then its
        parent's path), so every sibling is looked up once (a stored node or, on the right
        edge, the hash of an incomplete subtree, computed once for all of them) and a group
        commit's proofs cost a few list joins per node instead of a step per entry and level.
        ``encode_all``: what the nodes are handed out as, given every distinct node of the
        answer at once (their 32 bytes each, concatenated) and returning one value per node
        (``ocrr.ledger.proofs.b64_nodes``: one base64 pass for a whole batch); None: bytes.
        A ``range`` of indices (a group commit's entries) takes a shorter way: on each level,
        the nodes it needs are one run of stored nodes (``_run_leaves_and_proofs``)."""
        size = len(self) if size is None else self._check(size, "tree size")
        if isinstance(indices, range) and indices.step == 1 and len(indices):
            if not 0 <= indices.start < indices.stop <= size:
                bad = indices.start if indices.start < 0 else indices.stop - 1
                raise IndexError(f"entry {bad!r} is outside a log of size {size}")
            return self._run_leaves_and_proofs(indices.start, indices.stop, size, encode_all)
        for index in indices:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
                raise IndexError(f"entry {index!r} is outside a log of size {size}")
        reached = [dict.fromkeys(indices)]  # per level, bottom-up: the nodes the entries are under
        lasts = [size - 1]  # per level: the index of its last (maybe incomplete) node
        while lasts[-1] > 0:
            reached.append(dict.fromkeys(k >> 1 for k in reached[-1]))
            lasts.append(lasts[-1] >> 1)
        # The distinct nodes of the answer (the leaves, then each level's siblings), found
        # before any is encoded, so that they are encoded in one call.
        found: list[bytes | bytearray] = []
        where: list[dict[int, int]] = [{} for _ in lasts]  # per level: node index -> its place in found
        leaves, at = self.levels[0], where[0]
        for i in reached[0]:
            at[i] = len(found)
            found.append(leaves[i * HASH_SIZE : (i + 1) * HASH_SIZE])
        memo: dict = {}
        for level in range(len(lasts) - 1):  # the root's level has no siblings
            nodes, width, last, at = self.levels[level], 1 << level, lasts[level], where[level]
            for k in reached[level]:
                sib = k ^ 1
                if sib > last or sib in at:  # an even last node has no sibling (RFC 6962's right edge)
                    continue
                at[sib] = len(found)
                if (sib + 1) * width <= size:  # a complete subtree: stored
                    found.append(nodes[sib * HASH_SIZE : (sib + 1) * HASH_SIZE])
                else:
                    found.append(self._range(sib * width, size, memo))
        joined = b"".join(found)
        codes = _split_nodes(joined) if encode_all is None else encode_all(joined)
        above: dict[int, list[Any]] = dict.fromkeys(reached[-1], [])  # the root's path up: none
        for level in range(len(lasts) - 2, -1, -1):
            at, last = where[level], lasts[level]
            paths = {}
            for k in reached[level]:
                sib = k ^ 1
                paths[k] = above[k >> 1] if sib > last else [codes[at[sib]], *above[k >> 1]]
            above = paths
        at = where[0]
        # one list each (paths share their parts)
        return [codes[at[i]] for i in indices], [list(above[i]) for i in indices]

    def _run_leaves_and_proofs(
        self, lo: int, hi: int, size: int, encode_all: Callable[[bytes], Sequence[Any]] | None
    ) -> tuple[list[Any], list[list[Any]]]:
        """``leaves_and_proofs(range(lo, hi), size, encode_all)``, for 0 <= lo < hi <= size. On
        each level below the root, the entries are under the nodes ``lo >> level`` ..
        ``(hi - 1) >> level``; those and their siblings are one run of the level's nodes (the
        last one, when incomplete, hashed from the levels below), all encoded in one call."""
        chunks: list[bytes | bytearray] = []
        starts: list[int] = []  # per level: where its run starts in the answer's nodes, minus its first index
        lasts: list[int] = []  # per level: the index of its last (maybe incomplete) node
        memo: dict = {}
        count, level, last = 0, 0, size - 1
        while last > 0 or level == 0:  # the levels below the root (a log of one entry: its leaf's)
            first = (lo >> level) & ~1  # the first entry's node, or its sibling before it
            end = min(((hi - 1) >> level) | 1, last) + 1  # past the last one's sibling after it, if any
            complete = size >> level  # the nodes of this level that are stored
            chunks.append(self.levels[level][first * HASH_SIZE : min(end, complete) * HASH_SIZE])
            if end > complete:  # the right edge: the hash of an incomplete subtree
                chunks.append(self._range(complete << level, size, memo))
            starts.append(count - first)
            lasts.append(last)
            count += end - first
            level, last = level + 1, last >> 1
        joined = b"".join(chunks)
        codes = _split_nodes(joined) if encode_all is None else encode_all(joined)
        above: list[list[Any]] = [[]]  # the root's path up: none
        for level in range(len(lasts) - 1, -1, -1):
            start, last, up = starts[level], lasts[level], lo >> (level + 1)
            above = [
                above[(k >> 1) - up] if k ^ 1 > last else [codes[start + (k ^ 1)], *above[(k >> 1) - up]]
                for k in range(lo >> level, ((hi - 1) >> level) + 1)
            ]
        if (hi - 1) ^ 1 > size - 1:  # the last entry has no sibling: its path is its parent's, shared
            above[-1] = list(above[-1])
        return list(codes[starts[0] + lo : starts[0] + hi]), above

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
