"""Standalone checks of ocrr ledger proofs: needs only Python's standard library.

An auditor can copy this one file and check what an ocrr service or ``ocrr ledger``
hands out, without installing ocrr, numpy or anything else:

* ``entry_leaf_hash``: the Merkle leaf of one ledger entry (from its exported fields);
* ``verify_inclusion``: entry i is in the log of size n with this root (RFC 9162 2.1.3.2);
* ``verify_consistency``: the log of size m is a prefix of the log of size n (2.1.4.2;
  from m = 0, the empty log, the proof is empty and every log is consistent).

The tree is RFC 6962 / 9162 shaped: leaf = SHA-256(0x00 || data), node =
SHA-256(0x01 || left || right), and the empty tree's root is SHA-256 of nothing. Every
``verify_*`` returns None when the proof holds and raises ``ProofError`` saying why not.

Command line: ``python verify.py inclusion PROOF.json`` or ``consistency PROOF.json``
with the JSON that ``ocrr ledger prove`` / ``consistency`` print.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys

__all__ = [
    "ProofError",
    "leaf_hash",
    "node_hash",
    "EMPTY_ROOT",
    "entry_bytes",
    "entry_leaf_hash",
    "root_from_inclusion_proof",
    "verify_inclusion",
    "verify_consistency",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
# The ledger's canonical entry encoding (ocrr.ledger.chain.entry_digest hashes exactly these bytes).
_ENTRY_TAG = b"ocrr-ledger-entry-v1\x00"


class ProofError(ValueError):
    """A proof that does not hold, or is malformed."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def entry_bytes(id: int, label: str, text: str | None, vector_le_f32: bytes, prev_hash: bytes) -> bytes:
    """Canonical bytes of one ledger entry: tag | id u64 | len u32, label | text (0x00 if
    absent, else 0x01, len u32, utf-8) | dim u32 | little-endian float32 vector | prev_hash.
    Its SHA-256 is the entry's chain hash; SHA-256(0x00 || it) is its Merkle leaf."""
    if len(vector_le_f32) % 4:
        raise ProofError(f"vector bytes must be a whole number of float32 values, got {len(vector_le_f32)} bytes")
    lab = label.encode("utf-8")
    if text is None:
        txt = b"\x00"
    else:
        raw = text.encode("utf-8")
        txt = struct.pack("<BI", 1, len(raw)) + raw
    return b"".join(
        (
            _ENTRY_TAG,
            struct.pack("<QI", id, len(lab)),
            lab,
            txt,
            struct.pack("<I", len(vector_le_f32) // 4),
            vector_le_f32,
            prev_hash,
        )
    )


def entry_leaf_hash(id: int, label: str, text: str | None, vector_le_f32: bytes, prev_hash: bytes) -> bytes:
    return leaf_hash(entry_bytes(id, label, text, vector_le_f32, prev_hash))


def _check_hash(value: object, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != HASH_SIZE:
        size = len(value) if isinstance(value, (bytes, bytearray)) else type(value).__name__
        raise ProofError(f"{what} must be {HASH_SIZE} bytes, got {size}")
    return bytes(value)


def _check_size(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProofError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """The root that ``proof`` yields for ``leaf`` at ``index`` in a tree of ``size``."""
    index, size = _check_size(index, "leaf index"), _check_size(size, "tree size")
    if index >= size:
        raise ProofError(f"leaf index {index} is outside a tree of size {size}")
    r = _check_hash(leaf, "leaf hash")
    fn, sn = index, size - 1
    for j, p in enumerate(proof):
        p = _check_hash(p, f"proof[{j}]")
        if sn == 0:
            raise ProofError(f"proof has {len(proof)} hashes, more than a tree of size {size} needs")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:  # right edge: skip levels where the node has no sibling
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"proof has {len(proof)} hashes, fewer than a tree of size {size} needs")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes] | None, root: bytes) -> None:
    """Raise ProofError unless ``leaf`` is entry ``index`` of the tree of ``size`` with ``root``."""
    root = _check_hash(root, "root")
    got = root_from_inclusion_proof(index, size, leaf, list(proof or []))
    if got != root:
        raise ProofError(
            f"inclusion proof for entry {index} of {size} gives root {got.hex()[:16]}…, not {root.hex()[:16]}…"
        )


def verify_consistency(size1: int, size2: int, proof: list[bytes] | None, root1: bytes, root2: bytes) -> None:
    """Raise ProofError unless the tree of ``size1`` with ``root1`` is a prefix of the tree
    of ``size2`` with ``root2``."""
    size1, size2 = _check_size(size1, "size1"), _check_size(size2, "size2")
    proof = list(proof or [])
    if size1 > size2:
        raise ProofError(f"size1 {size1} is larger than size2 {size2}: a log never shrinks")
    if size1 == 0:
        root1, root2 = _check_hash(root1, "root1"), _check_hash(root2, "root2")
        # Every log extends the empty log (RFC 9162 2.1.4): the proof is empty, and the
        # only root a log of size 0 can have is the hash of nothing.
        if proof:
            raise ProofError(f"a consistency proof from the empty log must be empty, got {len(proof)} hashes")
        if root1 != EMPTY_ROOT:
            raise ProofError(f"root1 {root1.hex()[:16]}… is not the empty log's root (SHA-256 of nothing)")
        if size2 == 0 and root2 != EMPTY_ROOT:
            raise ProofError(f"root2 {root2.hex()[:16]}… is not the empty log's root (SHA-256 of nothing)")
        return
    if size1 == size2:
        if proof:
            raise ProofError(f"equal sizes need an empty proof, got {len(proof)} hashes")
        if root1 != root2:
            raise ProofError(f"two different roots for the same size {size1}")
        return
    root1, root2 = _check_hash(root1, "root1"), _check_hash(root2, "root2")
    if not proof:
        raise ProofError(f"a consistency proof from {size1} to {size2} cannot be empty")
    path = [_check_hash(p, f"proof[{j}]") for j, p in enumerate(proof)]
    if size1 & (size1 - 1) == 0:  # size1 is a power of two: its root is a node of the new tree
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"proof has {len(proof)} hashes, more than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"proof has {len(proof)} hashes, fewer than needed")
    if fr != root1:
        raise ProofError(f"proof does not lead to root1 (the log of size {size1})")
    if sr != root2:
        raise ProofError(f"proof does not lead to root2 (the log of size {size2})")


def _b64(s: str) -> bytes:
    """Standard base64 in its canonical spelling only (padded, unused bits zero)."""
    raw = base64.b64decode(s, validate=True)
    if base64.b64encode(raw).decode("ascii") != s:
        raise ValueError(f"{s[:60]!r} is not canonical standard base64")
    return raw


def main(argv: list[str] | None = None) -> int:
    """Check a proof JSON as printed by ``ocrr ledger prove`` / ``ocrr ledger consistency``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("inclusion", "consistency"):
        print("usage: python verify.py inclusion|consistency PROOF.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        doc = json.load(f)
    try:
        if argv[0] == "inclusion":
            e = doc["entry"]
            leaf = entry_leaf_hash(e["id"], e["label"], e.get("text"), _b64(e["vector"]), _b64(e["prev_hash"]))
            verify_inclusion(doc["index"], doc["size"], leaf, [_b64(p) for p in doc["proof"]], _b64(doc["root"]))
        else:
            verify_consistency(
                doc["from"], doc["to"], [_b64(p) for p in doc["proof"]], _b64(doc["root_from"]), _b64(doc["root_to"])
            )
    except (ProofError, KeyError, ValueError, TypeError) as e:
        print(f"FAILED: {e}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
