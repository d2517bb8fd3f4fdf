"""Compact per-entry columns of a ledger: hashes, labels and texts without a Python object per entry.

A ledger of ten million entries cannot keep a ``bytes`` object per chain hash, a ``str`` per
text and a list slot per field: those objects would cost several gigabytes per process. Each
column here keeps its values in a few flat buffers and hands out one value at a time, as a
list would (``len``, ``[i]``, slices as lists, iteration, ``append``, ``extend``):

* ``HashColumn``: 32-byte hashes, concatenated;
* ``LabelColumn``: a small-int code per entry and each distinct label once;
* ``TextColumn``: the texts' UTF-8 bytes, concatenated, where each ends, and which are None;
* ``PrefixedBytes``: bytes read and grown as a ``bytearray`` is (a Merkle tree level).

Each column may start with a read-only *prefix* (memoryviews, e.g. over memory shared with
other processes: ``ocrr.service.shared_rows``) followed by values of its own; the prefix is
never written, appends go to the column's own buffers. Pickled, a column carries its values,
not its prefix's memory.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["HashColumn", "LabelColumn", "PrefixedBytes", "TextColumn", "hash_column", "label_column", "text_column"]

HASH_SIZE = 32
_FIRST_SEEN_BLOCK = 1 << 16  # entries looked at per step for labels not seen yet


class _Column(Sequence[Any]):
    """What every column shares: list-like reading over ``_get`` (an index in range)."""

    __slots__ = ()

    def __len__(self) -> int:
        raise NotImplementedError

    def _get(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"column index {index} out of range for {n} values")
        return self._get(i)

    def __iter__(self) -> Iterator[Any]:
        return (self._get(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Column, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self):
        return type(self), (list(self),)


class HashColumn(_Column):
    """32-byte hashes in one buffer: ``prefix`` (read-only bytes-like, whole hashes) then ours."""

    __slots__ = ("_prefix", "_split", "_own")

    def __init__(self, hashes: Iterable[bytes] = (), prefix: Any = b"") -> None:
        self._prefix = memoryview(prefix).cast("B")
        if len(self._prefix) % HASH_SIZE:
            raise ValueError(f"hashes are {HASH_SIZE} bytes each, got a prefix of {len(self._prefix)} bytes")
        self._split = len(self._prefix) // HASH_SIZE
        self._own = bytearray()
        self.extend(hashes)

    def __len__(self) -> int:
        return self._split + len(self._own) // HASH_SIZE

    def _get(self, i: int) -> bytes:
        if i < self._split:
            return bytes(self._prefix[i * HASH_SIZE : (i + 1) * HASH_SIZE])
        at = (i - self._split) * HASH_SIZE
        return bytes(self._own[at : at + HASH_SIZE])

    def __getitem__(self, index: int | slice) -> Any:
        if index == -1 and self._own:  # the head: the chain's hot read
            return bytes(self._own[-HASH_SIZE:])
        return super().__getitem__(index)

    def append(self, value: bytes) -> None:
        if len(value) != HASH_SIZE:
            raise ValueError(f"a hash is {HASH_SIZE} bytes, got {len(value)}")
        self._own += value

    def extend(self, values: Iterable[bytes]) -> None:
        if isinstance(values, HashColumn):
            self.extend_bytes(values.to_bytes())
            return
        values = values if type(values) is list else list(values)
        if values and set(map(len, values)) != {HASH_SIZE}:
            raise ValueError(f"hashes are {HASH_SIZE} bytes each")
        self._own += b"".join(values)

    def extend_bytes(self, blob: bytes | bytearray | memoryview) -> None:
        """Append the hashes ``blob`` holds, concatenated."""
        if len(blob) % HASH_SIZE:
            raise ValueError(f"hashes are {HASH_SIZE} bytes each, got {len(blob)} bytes")
        self._own += blob

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """The first position of ``value`` (ValueError when absent), as ``list.index``."""
        if start or stop is not None:
            return super().index(value, start, len(self) if stop is None else stop)
        if isinstance(value, bytes) and len(value) == HASH_SIZE:
            for part, first in ((self._prefix, 0), (self._own, self._split)):
                data = bytes(part)
                at = data.find(value)
                while at >= 0:
                    if at % HASH_SIZE == 0:
                        return first + at // HASH_SIZE
                    at = data.find(value, at + 1)
        raise ValueError(f"{value!r} is not in the column")

    def to_bytes(self) -> bytes:
        """Every hash, concatenated."""
        return bytes(self._prefix) + bytes(self._own)

    def copy(self) -> HashColumn:
        """A column of the same hashes that appends on its own; the prefix stays shared."""
        twin = HashColumn(prefix=self._prefix)
        twin._own = bytearray(self._own)
        return twin

    def __reduce__(self):
        return _hashes_from_bytes, (self.to_bytes(),)


def _hashes_from_bytes(blob: bytes) -> HashColumn:
    column = HashColumn()
    column.extend_bytes(blob)
    return column


class LabelColumn(_Column):
    """Labels as an int32 code per entry (``prefix_codes`` first, read-only) and each distinct
    label once (``names``; a code is its position). Holds strings only (``label_column``)."""

    __slots__ = ("_names", "_code_of", "_prefix", "_split", "_own")

    def __init__(self, labels: Iterable[str] = (), names: Sequence[str] = (), prefix_codes: Any = b"") -> None:
        self._names: list[str] = list(names)
        self._code_of = {name: code for code, name in enumerate(self._names)}
        self._prefix = memoryview(prefix_codes).cast("B").cast("i")
        self._split = len(self._prefix)
        self._own = array("i")
        self.extend(labels)

    def __len__(self) -> int:
        return self._split + len(self._own)

    def _get(self, i: int) -> str:
        return self._names[self._prefix[i] if i < self._split else self._own[i - self._split]]

    def __iter__(self) -> Iterator[str]:
        name = self._names.__getitem__  # (C-level loops: a substrate encodes every label at open)
        return itertools.chain(map(name, self._prefix), map(name, self._own))

    def _code(self, label: str) -> int:
        code = self._code_of.get(label)
        if code is None:
            code = self._code_of[label] = len(self._names)
            self._names.append(label)
        return code

    def append(self, label: str) -> None:
        code = self._code_of.get(label)
        self._own.append(self._code(label) if code is None else code)

    def extend(self, labels: Iterable[str]) -> None:
        labels = labels if type(labels) is list else list(labels)
        known = list(map(self._code_of.get, labels))
        if None in known:  # labels not seen before: given codes in order
            self._own.extend([self._code(label) for label in labels])
        else:
            self._own.extend(known)  # type: ignore[arg-type]  # (no None: checked above)

    def __setitem__(self, index: int, label: str) -> None:
        """Replace one of this column's own labels (a test's tampering; the prefix is read-only)."""
        i = index + len(self) if index < 0 else index
        if not self._split <= i < len(self):
            raise IndexError(f"label {index} is not one of the column's own (read-only prefix, or out of range)")
        self._own[i - self._split] = self._code(label)

    @property
    def names(self) -> tuple[str, ...]:
        """Each distinct label once; a code is its place here."""
        return tuple(self._names)

    def copy(self) -> LabelColumn:
        """A column of the same labels that appends on its own; the prefix stays shared."""
        twin = LabelColumn(names=self._names, prefix_codes=self._prefix)
        twin._own = array("i", self._own)
        return twin

    def codes(self) -> array:
        """Every entry's code, as an int32 array (a copy)."""
        out = array("i", self._prefix.tobytes())
        out.extend(self._own)
        return out

    def first_seen(self) -> tuple[list[str], np.ndarray]:
        """The labels the column holds, each once in the order each first occurs, and every
        entry's place in that list (int64): what numbering the labels one by one as they come
        gives, without a Python step per entry."""
        prefix = np.frombuffer(self._prefix, np.int32)
        codes = np.concatenate([prefix, np.frombuffer(self._own, np.int32)]) if len(self._own) else prefix
        first: dict[int, int] = {}  # code -> the entry where it first occurs
        unseen = np.ones(len(self._names), bool)
        for lo in range(0, len(codes), _FIRST_SEEN_BLOCK):
            block = codes[lo : lo + _FIRST_SEEN_BLOCK]
            # Most blocks hold no label not seen before; a label first seen late (a class the
            # corrections brought) would otherwise have every block sorted on the way to it.
            if not unseen[block].any():
                continue
            block_codes, at = np.unique(block, return_index=True)
            for code, i in zip(block_codes.tolist(), at.tolist()):
                if unseen[code]:
                    first[code] = lo + i
                    unseen[code] = False
            if len(first) == len(self._names):
                break
        order = sorted(first, key=first.__getitem__)
        place = np.zeros(len(self._names), np.int64)
        place[order] = np.arange(len(order))
        return [self._names[code] for code in order], place[codes]


class TextColumn(_Column):
    """Texts (or None) as their UTF-8 bytes concatenated, where each ends (int64, in bytes) and
    which are None (a byte, 1 for None); a read-only prefix of the same three first. Any
    ``str`` round-trips, lone surrogates included (``surrogatepass``)."""

    __slots__ = ("_prefix", "_split", "_own_blob", "_own_ends", "_own_none")

    def __init__(self, texts: Iterable[str | None] = (), prefix: tuple[Any, Any, Any] = (b"", b"", b"")) -> None:
        blob, ends, none = prefix
        self._prefix = (memoryview(blob).cast("B"), memoryview(ends).cast("B").cast("q"), memoryview(none).cast("B"))
        self._split = len(self._prefix[1])
        if len(self._prefix[2]) != self._split:
            raise ValueError("a text prefix needs one end and one None mark per text")
        self._own_blob = bytearray()
        self._own_ends = array("q")
        self._own_none = bytearray()
        self.extend(texts)

    def __len__(self) -> int:
        return self._split + len(self._own_ends)

    def _get(self, i: int) -> str | None:
        split = self._split
        if i < split:
            blob, ends, none = self._prefix
            if none[i]:
                return None
            return str(blob[ends[i - 1] if i else 0 : ends[i]], "utf-8", "surrogatepass")
        j = i - split
        if self._own_none[j]:
            return None
        own = self._own_ends
        return str(self._own_blob[own[j - 1] if j else 0 : own[j]], "utf-8", "surrogatepass")

    def append(self, text: str | None) -> None:
        if text is None:
            self._own_none.append(1)
        else:
            self._own_blob += text.encode("utf-8", "surrogatepass")
            self._own_none.append(0)
        self._own_ends.append(len(self._own_blob))

    def extend(self, texts: Iterable[str | None]) -> None:
        texts = texts if type(texts) is list else list(texts)
        if None in texts:
            none = bytes([t is None for t in texts])
            present = [("" if t is None else t) for t in texts]
        else:
            none, present = bytes(len(texts)), texts
        joined = "".join(present)  # (a TypeError for a value that is not a str: nothing appended)
        if joined.isascii():  # one byte per character: the ends are the lengths, no text encoded alone
            lengths, blob = map(len, present), joined.encode("ascii")
        else:
            encoded = [t.encode("utf-8", "surrogatepass") for t in present]
            lengths, blob = map(len, encoded), b"".join(encoded)
        at = len(self._own_blob)
        self._own_ends.extend(itertools.islice(itertools.accumulate(lengths, initial=at), 1, None))
        self._own_blob += blob
        self._own_none += none

    def extend_blob(self, blob: bytes, ends: np.ndarray, none: bytes) -> None:
        """Append texts given as ``parts`` gives them: their UTF-8 bytes concatenated (valid:
        the caller decoded them once), where each ends in ``blob``, and which are None."""
        at = len(self._own_blob)
        self._own_ends.frombytes((np.asarray(ends, np.int64) + at).tobytes())
        self._own_blob += blob
        self._own_none += none

    def copy(self) -> TextColumn:
        """A column of the same texts that appends on its own; the prefix stays shared."""
        twin = TextColumn(prefix=self._prefix)
        twin._own_blob, twin._own_ends = bytearray(self._own_blob), array("q", self._own_ends)
        twin._own_none = bytearray(self._own_none)
        return twin

    def parts(self) -> tuple[bytes, array, bytes]:
        """Every text's bytes concatenated, where each ends there (int64), which are None."""
        blob, ends, none = self._prefix
        base = ends[-1] if self._split else 0
        all_ends = array("q", ends.tobytes())
        all_ends.frombytes((np.frombuffer(self._own_ends, np.int64) + base).tobytes())
        return bytes(blob[:base]) + bytes(self._own_blob), all_ends, bytes(none) + bytes(self._own_none)


class PrefixedBytes:
    """A read-only prefix (bytes-like) then bytes of our own, used where a ``bytearray`` is by
    a ``MerkleTree`` level: ``len``, slices (as ``bytes``), ``+=``, ``del [start:]``, ``bytes()``,
    equality with bytes. Cutting into the prefix copies what stays of it first."""

    __slots__ = ("_prefix", "_split", "_own")

    def __init__(self, prefix: Any = b"") -> None:
        self._prefix = memoryview(prefix).cast("B")
        self._split = len(self._prefix)
        self._own = bytearray()

    def __len__(self) -> int:
        return self._split + len(self._own)

    def __getitem__(self, index: int | slice) -> Any:
        if not isinstance(index, slice):
            return (self._prefix.tobytes() + bytes(self._own))[index] if self._split else self._own[index]
        start, stop, step = index.indices(len(self))
        split = self._split
        if step != 1:
            return bytes(self)[index]
        if stop <= start:
            return b""
        if start >= split:
            return bytes(self._own[start - split : stop - split])
        if stop <= split:
            return bytes(self._prefix[start:stop])
        return bytes(self._prefix[start:]) + bytes(self._own[: stop - split])

    def __iadd__(self, more: Any) -> PrefixedBytes:
        self._own += more
        return self

    def __delitem__(self, index: slice) -> None:
        if not isinstance(index, slice) or index.stop is not None or index.step is not None:
            raise TypeError("only a tail can be cut (del level[start:])")
        start = index.indices(len(self))[0]
        if start < self._split:  # into the prefix: keep what stays of it as our own
            self._own = bytearray(self._prefix[:start])
            self._prefix, self._split = memoryview(b""), 0
        else:
            del self._own[start - self._split :]

    def __bytes__(self) -> bytes:
        return self._prefix.tobytes() + bytes(self._own)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (bytes, bytearray, memoryview, PrefixedBytes)):
            return bytes(self) == bytes(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a bytearray

    def __reduce__(self):
        return bytearray, (bytes(self),)


def hash_column(values: Sequence) -> HashColumn | list:
    """``values`` as a HashColumn, or as a plain list when any is not 32 bytes (a damaged
    ledger's, kept as stored so that ``verify`` names it)."""
    if isinstance(values, HashColumn):
        return values.copy()
    values = list(values)
    if all(type(v) is bytes and len(v) == HASH_SIZE for v in values):
        return HashColumn(values)
    return values


def label_column(values: Sequence) -> LabelColumn | list:
    """``values`` as a LabelColumn, or as a plain list when any is not a ``str``."""
    if isinstance(values, LabelColumn):
        return values.copy()
    values = list(values)
    if all(type(v) is str for v in values):
        return LabelColumn(values)
    return values


def text_column(values: Sequence) -> TextColumn | list:
    """``values`` as a TextColumn, or as a plain list when any is neither a ``str`` nor None."""
    if isinstance(values, TextColumn):
        return values.copy()
    values = list(values)
    if all(v is None or type(v) is str for v in values):
        return TextColumn(values)
    return values
