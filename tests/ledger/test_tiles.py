"""C2SP tlog-tiles from the Merkle tree: paths, full and partial tiles, entry bundles."""

from __future__ import annotations

import hashlib
import struct

import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.tiles import (
    TILE_WIDTH,
    Tile,
    entry_bundle,
    parse_tile_path,
    tile_bytes,
    tile_path,
    tile_width,
    tiles_of,
)
from ocrr.ledger.verify import leaf_hash, node_hash


def _tree(n: int) -> MerkleTree:
    tree = MerkleTree()
    for i in range(n):
        tree.append(leaf_hash(i.to_bytes(8, "little")))
    return tree


def _subtree(leaves: list[bytes]) -> bytes:
    """The root of a complete subtree, by hashing pairs: independent of MerkleTree."""
    while len(leaves) > 1:
        leaves = [node_hash(leaves[k], leaves[k + 1]) for k in range(0, len(leaves), 2)]
    return leaves[0]


@pytest.mark.parametrize(
    ("tile", "path"),
    [
        (Tile(0, 0), "tile/0/000"),
        (Tile(0, 0, 1), "tile/0/000.p/1"),
        (Tile(1, 7, 255), "tile/1/007.p/255"),
        (Tile(0, 1000), "tile/0/x001/000"),
        (Tile(4, 1234067, 8), "tile/4/x001/x234/067.p/8"),
        (Tile(63, 1234067), "tile/63/x001/x234/067"),
        (Tile(None, 5, 3), "tile/entries/005.p/3"),
    ],
)
def test_paths_are_written_and_read_back_as_the_spec_spells_them(tile, path):
    assert tile.path == path == tile_path(tile.level, tile.index, tile.width)
    assert parse_tile_path(path) == tile
    assert parse_tile_path(path[len("tile/") :]) == tile


@pytest.mark.parametrize(
    "path",
    [
        "tile/0/0",  # not three digits
        "tile/0/0000",
        "tile/0/001/234",  # a non-final element without its x
        "tile/0/x000/123",  # a leading zero element
        "tile/0/x1234/067",
        "tile/0/000.p/0",  # widths are 1..255
        "tile/0/000.p/256",
        "tile/0/000.p/01",
        "tile/0/000.p/",
        "tile/64/000",  # levels are 0..63
        "tile/01/000",
        "tile/-1/000",
        "tile/data/000",
        "tile/0/000/",
        "tile/0/x001/",
        "tile/0/٠٠١",  # Arabic-Indic digits
    ],
)
def test_malformed_paths_are_refused_with_the_fix(path):
    with pytest.raises(OcrrError, match="tlog-tiles"):
        parse_tile_path(path)


@pytest.mark.parametrize("size", [1, 5, 255, 256, 257, 511, 512, 1000, 65536 + 300])
def test_tile_hashes_are_the_trees_subtree_hashes(size):
    tree = _tree(size)
    leaves = [tree.node(0, i) for i in range(size)]
    seen = 0
    for tile in tiles_of(size):
        data = tile_bytes(tree, size, tile)
        assert len(data) == 32 * tile.width
        span = 1 << (8 * tile.level)  # leaves under each hash of the tile
        for k in range(tile.width):
            first = (tile.index * TILE_WIDTH + k) * span
            assert data[32 * k : 32 * (k + 1)] == _subtree(leaves[first : first + span])
        seen += tile.level == 0
        # A full tile's hashes are the leaves of one subtree of 2**(8 (L+1)) leaves: its
        # root is the hash the tile one level up holds for it.
        if not tile.partial and size >> (8 * (tile.level + 1)):
            parent = Tile(tile.level + 1, tile.index // TILE_WIDTH, tile.index % TILE_WIDTH + 1)
            above = tile_bytes(tree, size, parent)
            assert above[-32:] == _subtree([data[j : j + 32] for j in range(0, len(data), 32)])
    assert seen == -(-size // TILE_WIDTH)


def test_partial_tiles_grow_by_their_right_edge_and_full_ones_never_change():
    tree = _tree(700)
    assert [t.path for t in tiles_of(700)] == ["tile/0/000", "tile/0/001", "tile/0/002.p/188", "tile/1/000.p/2"]
    assert tile_width(700, 0, 2) == 188 and tile_width(700, 1, 0) == 2 and tile_width(700, 0, 3) == 0
    # A client holding an older checkpoint (size 600) reads a narrower partial tile: a prefix.
    old = tile_bytes(tree, 600, Tile(0, 2, 88))
    assert tile_bytes(tree, 700, Tile(0, 2, 188))[: len(old)] == old
    assert tile_bytes(tree, 700, Tile(0, 2, 88)) == old  # narrower widths stay servable
    full = tile_bytes(tree, 700, Tile(0, 0))
    for _ in range(300):
        tree.append(leaf_hash(b"more"))
    assert tile_bytes(tree, 1000, Tile(0, 0)) == full
    assert tile_bytes(tree, 1000, Tile(0, 2))[: len(old)] == old


def test_tiles_the_tree_does_not_hold_say_which_to_ask_for():
    tree = _tree(300)
    with pytest.raises(LookupError, match=r"holds 44 of 256 hashes; ask for tile/0/001.p/44"):
        tile_bytes(tree, 300, Tile(0, 1))
    with pytest.raises(LookupError, match="does not exist yet"):
        tile_bytes(tree, 300, Tile(0, 2, 1))
    with pytest.raises(LookupError, match="does not exist yet"):
        tile_bytes(tree, 300, Tile(2, 0, 1))
    with pytest.raises(LookupError):  # the tree of size 200 does not hold the tile of size 300
        tile_bytes(tree, 200, Tile(0, 0, 201))


def test_entry_bundles_prefix_each_entry_with_its_big_endian_length():
    bundle = entry_bundle([b"ab", b"", b"x" * 300])
    assert bundle == b"\x00\x02ab" + b"\x00\x00" + struct.pack(">H", 300) + b"x" * 300
    with pytest.raises(OcrrError, match="65535"):
        entry_bundle([b"x" * 65536])


def test_tile_hash_of_a_full_tile_matches_go_sumdb_tlog_vectors():
    """Go's tlog test: tile/8/0/000 of leaves RecordHash("hello, world 0".."hello, world 255")
    hashes (as one subtree) to the tree hash of size 256."""
    tree = MerkleTree()
    for i in range(256):
        tree.append(hashlib.sha256(b"\x00" + f"hello, world {i}".encode()).digest())
    data = tile_bytes(tree, 256, Tile(0, 0))
    assert _subtree([data[j : j + 32] for j in range(0, len(data), 32)]) == tree.root(256)
    assert tile_bytes(tree, 256, Tile(1, 0, 1)) == tree.root(256)
