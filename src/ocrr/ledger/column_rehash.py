"""Rehash entries held as flat columns, and compare each with the chain hash stored for it.

A quick open trusts the entries under an authenticated checkpoint without rehashing them: it
checks their links and that the stored chain hash of the last of them is the checkpoint's
signed chain head. Rehashing each entry from its fields and the stored hash before it, and
finding the stored hash, then ties every one of them to that signed head (a changed field
changes the hash, and with it every hash after). ``first_mismatch`` does that for entries held
as the flat columns a service shares between its processes (``ocrr.service.shared_rows``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocrr.ledger.chain import GENESIS, Chain
from ocrr.ledger.columns import HashColumn, LabelColumn, TextColumn
from ocrr.ledger.verify import encoded_entry_head

__all__ = ["HeldColumns", "chain_columns", "first_mismatch"]

_HASH = 32


@dataclass(frozen=True)
class HeldColumns:
    """``size`` entries as flat buffers: ``rows`` (size x dim little-endian float32), each
    label as ``label_names[label_codes[i]]``, each text as its UTF-8 bytes in ``text_blob``
    ending at ``text_ends[i]`` (None where ``text_none[i]``), and ``hashes`` (32 bytes each,
    the chain hashes stored for them)."""

    size: int
    rows: Any  # (size, dim) little-endian float32: an array, or what slices into arrays and has a shape
    label_names: tuple[str, ...]
    label_codes: Any  # int32 per entry (a buffer)
    text_blob: Any  # bytes-like
    text_ends: Any  # int64 per entry (a buffer)
    text_none: Any  # uint8 per entry (a buffer)
    hashes: Any  # bytes-like, 32 per entry


def chain_columns(chain: Chain) -> HeldColumns:
    """The entries ``chain`` holds now as flat columns: its own rows, copies of the rest."""
    rows = chain.vectors
    labels, texts, hashes = chain.stored_columns()
    labels = labels if isinstance(labels, LabelColumn) else LabelColumn(list(labels))
    texts = texts if isinstance(texts, TextColumn) else TextColumn(list(texts))
    blob, ends, none = texts.parts()
    hashed = hashes.to_bytes() if isinstance(hashes, HashColumn) else b"".join(hashes)
    return HeldColumns(len(rows), rows, labels.names, labels.codes(), blob, ends, none, hashed)


def first_mismatch(cols: HeldColumns, lo: int, hi: int) -> int | None:
    """Rehash entries ``lo``..``hi - 1`` of ``cols``, each from its fields and the stored chain
    hash before it; the first whose hash is not the one stored for it, or None."""
    hi = min(hi, cols.size)
    if lo >= hi:
        return None
    dim = cols.rows.shape[1]
    names = [name.encode("utf-8") for name in cols.label_names]
    codes = np.frombuffer(cols.label_codes, np.int32, hi - lo, 4 * lo).tolist()
    ends = np.frombuffer(cols.text_ends, np.int64, hi - lo + (lo > 0), 8 * (lo - 1) if lo else 0).tolist()
    if not lo:
        ends.insert(0, 0)
    none = bytes(cols.text_none[lo:hi])
    with memoryview(cols.hashes) as hashes, memoryview(cols.text_blob) as blob:
        rows = np.ascontiguousarray(cols.rows[lo:hi], "<f4")
        with rows.data.cast("B") as row_bytes:
            width = dim * 4
            prev: bytes | memoryview = bytes(hashes[(lo - 1) * _HASH : lo * _HASH]) if lo else GENESIS
            sha256 = hashlib.sha256
            for k in range(hi - lo):
                text = None if none[k] else blob[ends[k] : ends[k + 1]].tobytes()
                digest = sha256(encoded_entry_head(lo + k, names[codes[k]], text, dim))
                digest.update(row_bytes[k * width : (k + 1) * width])
                digest.update(prev)
                prev = hashes[(lo + k) * _HASH : (lo + k + 1) * _HASH]
                if digest.digest() != prev:
                    return lo + k
    return None
