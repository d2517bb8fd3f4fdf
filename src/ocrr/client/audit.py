"""A tiles-based audit of the whole log against one verified checkpoint.

The service's proof endpoints are not used: the client fetches the C2SP tiles
(c2sp.org/tlog-tiles) the log of the checkpoint's size is made of, rebuilds the Merkle tree
from its leaves and compares its root with the signed one. The leaves come from the level-0
hash tiles or, with the service token, from the entry bundles: every entry is then rehashed,
and its chain (each entry's ``prev_hash`` is the hash of the entry before) and id checked
too. Every hash tile served (at every level) must then be the rebuilt tree's own, so a forged
upper tile is caught even when the leaves are honest.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ocrr.client.checkpoints import Checkpoint
from ocrr.client.errors import AuditFailed
from ocrr.ledger.chain import GENESIS
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.tiles import TILE_HEIGHT, TILE_WIDTH, Tile, tile_bytes, tile_path, tile_width, tiles_of
from ocrr.ledger.verify import ENTRY_TAG, HASH_SIZE, leaf_hash

__all__ = ["AuditReport", "audit_tiles"]

#: ``fetch(path, auth)``: the bytes the service serves at ``/<path>``.
TileSource = Callable[[str, bool], bytes]


@dataclass(frozen=True)
class AuditReport:
    size: int
    entries_checked: int
    entries_rehashed: int  # entries whose bytes were fetched and hashed (0 without the token)
    tiles_checked: int
    checkpoint: Checkpoint

    def to_dict(self) -> dict:
        return {
            "ok": True,
            "size": self.size,
            "entries_checked": self.entries_checked,
            "entries_rehashed": self.entries_rehashed,
            "tiles_checked": self.tiles_checked,
            "checkpoint": self.checkpoint.to_dict(),
        }


def audit_tiles(fetch: TileSource, checkpoint: Checkpoint, entries: bool) -> AuditReport:
    """Rebuild the tree of ``checkpoint.size`` leaves from the tiles ``fetch`` serves (from the
    entry bundles with ``entries``) and check it is the one ``checkpoint`` signs; AuditFailed
    naming the first tile that is not."""
    size, tree = checkpoint.size, MerkleTree()
    chain = GENESIS
    bundles = -(-size // TILE_WIDTH)
    for index in range(bundles):
        width = tile_width(size, 0, index)
        if entries:
            path = tile_path(None, index, width)
            for k, raw in enumerate(_split_bundle(fetch(path, True), width, path, checkpoint)):
                chain = _check_entry(index * TILE_WIDTH + k, raw, chain, path, checkpoint)
                tree.append(leaf_hash(raw))
        else:
            path = tile_path(0, index, width)
            body = fetch(path, False)
            if len(body) != width * HASH_SIZE:
                raise _failed(f"{path} holds {len(body)} bytes, not {width} hashes of {HASH_SIZE}", path, checkpoint)
            for k in range(width):
                tree.append(body[k * HASH_SIZE : (k + 1) * HASH_SIZE])
    served = {tile: fetch(tile.path, False) for tile in tiles_of(size) if tile.level or entries}
    if tree.root(size) != checkpoint.root:
        leaves = "the entries' bytes" if entries else "the level-0 tiles"
        suspect = _first_disagreeing_leaf_tile(tree, size, served, entries)
        where = f"; the first tile of leaves that disagrees with the level above it is {suspect}" if suspect else ""
        raise _failed(
            f"the tree rebuilt from {leaves} does not have the root the checkpoint of {size} entries signs{where}",
            suspect,
            checkpoint,
        )
    for tile, body in served.items():  # the leaves are right: every tile served must be the tree's own
        if body != tile_bytes(tree, size, tile):
            raise _failed(_tile_differs(tile, entries), tile.path, checkpoint)
    tiles = len(served) + bundles  # with the entries: the bundles, and the level-0 hash tiles as well
    return AuditReport(size, size, size if entries else 0, tiles, checkpoint)


def _split_bundle(body: bytes, width: int, path: str, checkpoint: Checkpoint) -> list[bytes]:
    """The entries of an entry bundle (each after its length, a big-endian uint16)."""
    out, at = [], 0
    while at < len(body):
        if at + 2 > len(body):
            break
        (n,) = struct.unpack_from(">H", body, at)
        out.append(body[at + 2 : at + 2 + n])
        at += 2 + n
    if at != len(body) or len(out) != width or any(len(e) < len(ENTRY_TAG) + 8 + HASH_SIZE for e in out):
        raise _failed(f"{path} is not a bundle of {width} ocrr entries", path, checkpoint)
    return out


def _check_entry(index: int, raw: bytes, chain: bytes, path: str, checkpoint: Checkpoint) -> bytes:
    """The chain hash of entry ``index`` (``raw``), once its tag, id and prev_hash are right."""
    if not raw.startswith(ENTRY_TAG):
        raise _failed(f"entry {index} in {path} is not an ocrr ledger entry", path, checkpoint)
    (got,) = struct.unpack_from("<Q", raw, len(ENTRY_TAG))
    if got != index:
        raise _failed(f"entry {index} in {path} carries id {got}", path, checkpoint)
    if raw[-HASH_SIZE:] != chain:
        raise _failed(f"entry {index} in {path} does not chain on the entry before it", path, checkpoint)
    return hashlib.sha256(raw).digest()


def _first_disagreeing_leaf_tile(tree: MerkleTree, size: int, served: dict, entries: bool) -> str | None:
    """The first full tile of leaves whose subtree hash is not the one the level-1 tile serves
    (else the partial tile of leaves, the only one the level above does not cover): where the
    leaves most likely went wrong."""
    above = {tile.index: body for tile, body in served.items() if tile.level == 1}
    for index in range(size // TILE_WIDTH):
        body = above.get(index // TILE_WIDTH, b"")
        at = (index % TILE_WIDTH) * HASH_SIZE
        if body[at : at + HASH_SIZE] != tree.node(TILE_HEIGHT, index):
            return tile_path(None if entries else 0, index)
    width = tile_width(size, 0, size // TILE_WIDTH)
    return tile_path(None if entries else 0, size // TILE_WIDTH, width) if width else None


def _tile_differs(tile: Tile, entries: bool) -> str:
    below = "the entries" if entries and tile.level == 0 else "the tiles below it"
    return f"{tile.path} is not the tile of the tree rebuilt from {below}: the service serves a forged or altered tile"


def _failed(reason: str, path: str | None, checkpoint: Checkpoint) -> AuditFailed:
    return AuditFailed(
        f"audit failed at the checkpoint of {checkpoint.size} entries: {reason}. The service's tiles are not the "
        "log it signed: do not trust it, and show the operator this tile and the checkpoint",
        checkpoint.note,
        path,
    )
