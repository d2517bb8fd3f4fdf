"""The Merkle tree as C2SP tlog-tiles (c2sp.org/tlog-tiles): what other people's log tools read.

A *tile* at level ``L``, index ``N`` lists, 32 bytes each, the hashes of the complete
subtrees of ``2**(8 L)`` leaves numbered ``N * 256 .. N * 256 + W - 1`` (the tree's nodes at
height ``8 L``: level 0 holds the leaf hashes). A *full* tile has ``W = 256``; the rightmost
tile of a level whose node count is not a multiple of 256 is *partial* (``1 <= W <= 255``).
Tiles only ever grow by their right edge, so the bytes of a tile at a given width never
change: full tiles are cacheable forever, partial ones until they fill up.

Paths (what ``tile_path`` writes and ``parse_tile_path`` reads, strictly):
``tile/<L>/<N>[.p/<W>]``, ``L`` in 0..63 in decimal, ``N`` as zero-padded three-digit
path elements, all but the last prefixed with ``x`` (1234067 -> ``x001/x234/067``), and
``.p/<W>`` only for a partial tile. ``tile/entries/<N>[.p/<W>]`` names an entry bundle:
the entries' bytes (``ocrr.ledger.verify.entry_bytes``), each prefixed with its length as
a big-endian uint16 (``entry_bundle``).

Go's ``golang.org/x/mod/sumdb/tlog`` computes the same tiles (``Tile{H: 8, L, N, W}``; its
paths add the height, ``tile/8/<L>/...``, and call the entries level ``data``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ocrr.errors import OcrrError
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import HASH_SIZE

__all__ = [
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "tile_path",
    "parse_tile_path",
    "tile_width",
    "tile_bytes",
    "tiles_of",
    "entry_bundle",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # 256 hashes in a full tile
MAX_LEVEL = 63
_MAX_ENTRY = 0xFFFF  # an entry bundle's length prefix is a uint16
_PATH_FIX = "ask for tile/<L>/<N>[.p/<W>] as c2sp.org/tlog-tiles spells it, e.g. tile/0/x001/234.p/5"
_INDEX = re.compile(r"((?:x[0-9]{3}/)*)([0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?")
_LEVEL = re.compile(r"0|[1-9][0-9]?|entries")


@dataclass(frozen=True)
class Tile:
    """Tile ``index`` at ``level`` (``None``: the entries level), ``width`` hashes (or entries)."""

    level: int | None
    index: int
    width: int = TILE_WIDTH

    @property
    def partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        return tile_path(self.level, self.index, self.width)


def _encode_index(index: int) -> str:
    parts = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        parts.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(parts))


def tile_path(level: int | None, index: int, width: int = TILE_WIDTH) -> str:
    """``tile/<L>/<N>[.p/<W>]`` (``level=None``: ``tile/entries/...``)."""
    if level is not None and not 0 <= level <= MAX_LEVEL:
        raise ValueError(f"tile level {level} is outside 0..{MAX_LEVEL}")
    if index < 0 or not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile index {index} must be >= 0 and width {width} in 1..{TILE_WIDTH}")
    partial = f".p/{width}" if width < TILE_WIDTH else ""
    return f"tile/{'entries' if level is None else level}/{_encode_index(index)}{partial}"


def parse_tile_path(path: str) -> Tile:
    """The tile a path names; the path is ``tile/<L>/<N>[.p/<W>]`` (the leading ``tile/`` may
    be left out) in its one canonical spelling, else OcrrError naming the fix."""
    rest = path[len("tile/") :] if path.startswith("tile/") else path
    level_s, _, index_s = rest.partition("/")
    if not _LEVEL.fullmatch(level_s):
        raise OcrrError(f"tile path {path[:80]!r}: the level must be 0..{MAX_LEVEL} or 'entries'; {_PATH_FIX}")
    level = None if level_s == "entries" else int(level_s)
    if level is not None and level > MAX_LEVEL:
        raise OcrrError(f"tile path {path[:80]!r}: level {level} is above {MAX_LEVEL}; {_PATH_FIX}")
    m = _INDEX.fullmatch(index_s)
    if m is None:
        raise OcrrError(
            f"tile path {path[:80]!r}: the index must be three-digit elements, all but the last "
            f"prefixed with 'x', then optionally .p/<width 1..255>; {_PATH_FIX}"
        )
    head, last, width_s = m.groups()
    elements = [e[1:] for e in head.split("/") if e] + [last]
    if len(elements) > 1 and elements[0] == "000":
        raise OcrrError(f"tile path {path[:80]!r}: the index has a leading x000 element; {_PATH_FIX}")
    index = int("".join(elements))
    width = TILE_WIDTH if width_s is None else int(width_s)
    if width_s is not None and width >= TILE_WIDTH:
        raise OcrrError(f"tile path {path[:80]!r}: a partial width must be 1..{TILE_WIDTH - 1}; {_PATH_FIX}")
    return Tile(level, index, width)


def tile_width(size: int, level: int | None, index: int) -> int:
    """How many hashes (0..256) tile ``index`` at ``level`` holds in the tree of ``size`` leaves."""
    nodes = size >> (TILE_HEIGHT * (level or 0))
    return max(0, min(TILE_WIDTH, nodes - index * TILE_WIDTH))


def tile_bytes(tree: MerkleTree, size: int, tile: Tile) -> bytes:
    """The hashes of a hash tile of the tree of ``size`` leaves (``size <= len(tree)``),
    concatenated. A partial width asks for the first ``width`` hashes of the tile, which
    exist as soon as the tile holds at least that many; a full tile only once it is full.
    LookupError (saying what exists) if the tree of ``size`` does not hold the tile."""
    if tile.level is None:
        raise ValueError("an entries tile is not a hash tile: build it with entry_bundle")
    if not 0 <= size <= len(tree):
        raise ValueError(f"tree size {size} is outside 0..{len(tree)}")
    have = tile_width(size, tile.level, tile.index)
    if have < tile.width:
        raise LookupError(_missing(size, tile, have))
    height = TILE_HEIGHT * tile.level
    lo = tile.index * TILE_WIDTH * HASH_SIZE
    return bytes(tree.levels[height][lo : lo + tile.width * HASH_SIZE])


def _missing(size: int, tile: Tile, have: int) -> str:
    what = tile.path
    if have == 0:
        return f"{what} does not exist yet: the log holds {size} entries"
    return (
        f"{what} does not exist yet: at {size} entries that tile holds {have} of {TILE_WIDTH} hashes; "
        f"ask for {tile_path(tile.level, tile.index, have)}"
    )


def tiles_of(size: int) -> Iterator[Tile]:
    """Every hash tile of the tree of ``size`` leaves, each at its current width, level by level."""
    level = 0
    while size >> (TILE_HEIGHT * level):
        nodes = size >> (TILE_HEIGHT * level)
        for index in range((nodes + TILE_WIDTH - 1) // TILE_WIDTH):
            yield Tile(level, index, tile_width(size, level, index))
        if nodes < TILE_WIDTH:
            break
        level += 1


def entry_bundle(entries: Iterable[bytes]) -> bytes:
    """An entry bundle (c2sp.org/tlog-tiles): each entry's bytes after its length, a
    big-endian uint16. OcrrError for an entry longer than 65535 bytes (a bundle cannot hold it)."""
    out = bytearray()
    for k, entry in enumerate(entries):
        if len(entry) > _MAX_ENTRY:
            raise OcrrError(
                f"entry {k} of the bundle is {len(entry)} bytes, more than an entry bundle's {_MAX_ENTRY}; "
                "fetch it with /proof/inclusion/<index>/entry instead"
            )
        out += struct.pack(">H", len(entry)) + entry
    return bytes(out)
