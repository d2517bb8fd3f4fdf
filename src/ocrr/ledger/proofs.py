"""Proof documents and base64: the one place ocrr writes and reads them.

``ocrr ledger prove`` / ``consistency``, the service's ``/proof/...`` routes and its
``/correct`` answers hand out the same two JSON documents, hashes in standard base64:

* an inclusion proof, ``{"index", "size", "root", "leaf_hash", "proof"}`` (``InclusionProof``):
  the leaf ``leaf_hash`` is entry ``index`` of the log of ``size`` entries with ``root``;
* a consistency proof, ``{"from", "to", "root_from", "root_to", "proof"}`` (``ConsistencyProof``):
  the log of ``from`` entries is a prefix of the log of ``to``.

An inclusion proof may carry the entry itself (``entry_fields``, plus its chain ``hash`` or its
``bytes``), so that a reader can rebuild the leaf. ``ocrr.client`` reads the documents with
``from_dict``; anyone else can check them with the standalone verifier, ``ocrr.ledger.verify``.
The reading and the base64 pair (``b64``, ``unb64``) are defined there, because an auditor
copies that one file without ocrr, and re-exported here for the rest of ocrr.
"""

from __future__ import annotations

import binascii
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import HASH_SIZE, ProofError, b64, read_consistency, read_inclusion, unb64

__all__ = ["b64", "unb64", "shared_b64", "b64_nodes", "InclusionProof", "ConsistencyProof", "entry_fields"]

_PADDED = HASH_SIZE + 1  # a hash and a zero byte: 11 whole groups of 3 bytes
_PADDED_B64 = _PADDED // 3 * 4  # its base64: b64 of the hash, with "A" where b64 ends in "="


def shared_b64() -> Callable[[bytes], str]:
    """``b64`` that encodes each distinct value once: the proofs of one batch share most nodes."""
    return functools.cache(b64)


def b64_nodes(joined: bytes) -> list[str]:
    """``b64`` of each 32-byte hash of ``joined`` (their concatenation), encoded in one pass:
    a batch's proofs hold hundreds of distinct nodes (``MerkleTree.leaves_and_proofs``).
    Each hash is padded with a zero byte, so that each encodes on its own 44 characters, whose
    last one then stands where ``b64`` writes its padding "="."""
    if len(joined) % HASH_SIZE:
        raise ValueError(f"hashes are {HASH_SIZE} bytes each, got {len(joined)} bytes")
    count = len(joined) // HASH_SIZE
    padded = bytearray(_PADDED * count)
    for j in range(HASH_SIZE):  # byte j of every hash at once
        padded[j::_PADDED] = joined[j::HASH_SIZE]
    text = bytearray(binascii.b2a_base64(padded, newline=False))
    text[_PADDED_B64 - 1 :: _PADDED_B64] = b"=" * count
    spelled = text.decode("ascii")
    return [spelled[j : j + _PADDED_B64] for j in range(0, len(spelled), _PADDED_B64)]


def _inclusion_documents(size: int, root_b64: str, found: Iterable[tuple[int, str, list[str]]]) -> list[dict]:
    """The JSON documents of inclusion proofs ``(index, leaf, path)`` in base64, in the log of
    ``size`` entries with ``root_b64`` (what every proof the service or the CLI hands out looks like)."""
    return [{"index": i, "size": size, "root": root_b64, "leaf_hash": leaf, "proof": path} for i, leaf, path in found]


@dataclass(frozen=True)
class InclusionProof:
    """``leaf`` is entry ``index`` of the log of ``size`` entries with ``root``, by ``path``."""

    index: int
    size: int
    root: bytes
    leaf: bytes
    path: list[bytes]

    @classmethod
    def of(cls, tree: MerkleTree, index: int, size: int) -> InclusionProof:
        """Entry ``index``'s proof in the log of the first ``size`` leaves of ``tree``."""
        return cls(index, size, tree.root(size), tree.node(0, index), tree.inclusion_proof(index, size))

    def to_dict(self, encode: Callable[[bytes], str] = b64) -> dict:
        """The JSON document; ``encode``: ``b64``, or one ``shared_b64()`` for many proofs at once."""
        found = [(self.index, encode(self.leaf), list(map(encode, self.path)))]
        return _inclusion_documents(self.size, encode(self.root), found)[0]

    @staticmethod
    def documents(
        size: int, root: bytes, found: Iterable[tuple[int, Any, list[Any]]], encoded: bool = False
    ) -> list[dict]:
        """``to_dict`` of the proof of each ``(index, leaf, path)`` of ``found`` in the log of
        ``size`` entries with ``root`` (a group commit's answer), each node encoded once.
        ``encoded``: the leaves and paths are in base64 already (``head_with_proofs(ids, b64)``,
        which encodes each distinct node once); their lists become the documents' own."""
        if encoded:
            return _inclusion_documents(size, b64(root), found)
        encode = shared_b64()
        return _inclusion_documents(
            size, encode(root), ((i, encode(leaf), list(map(encode, path))) for i, leaf, path in found)
        )

    @classmethod
    def from_dict(cls, doc: object) -> InclusionProof:
        """The proof a document states (not verified); ProofError naming a missing or malformed field."""
        if not isinstance(doc, dict):
            raise ProofError(f"an inclusion proof is a JSON object, got {type(doc).__name__}")
        index, size, root, leaf, path = read_inclusion(doc)
        if leaf is None:
            raise ProofError("the document has no 'leaf_hash' field")
        return cls(index, size, root, leaf, path)


@dataclass(frozen=True)
class ConsistencyProof:
    """The log of ``size1`` entries with ``root1`` is a prefix of the log of ``size2`` with ``root2``."""

    size1: int
    size2: int
    root1: bytes
    root2: bytes
    path: list[bytes]

    @classmethod
    def of(cls, tree: MerkleTree, size1: int, size2: int) -> ConsistencyProof:
        """The proof that the first ``size1`` leaves of ``tree`` are a prefix of its first ``size2``."""
        return cls(size1, size2, tree.root(size1), tree.root(size2), tree.consistency_proof(size1, size2))

    def to_dict(self) -> dict:
        return {
            "from": self.size1,
            "to": self.size2,
            "root_from": b64(self.root1),
            "root_to": b64(self.root2),
            "proof": [b64(p) for p in self.path],
        }

    @classmethod
    def from_dict(cls, doc: object) -> ConsistencyProof:
        """The proof a document states (not verified); ProofError naming a missing or malformed field."""
        if not isinstance(doc, dict):
            raise ProofError(f"a consistency proof is a JSON object, got {type(doc).__name__}")
        size1, size2, root1, root2, path = read_consistency(doc)
        if root1 is None or root2 is None:
            raise ProofError(f"the document has no {'root_from' if root1 is None else 'root_to'!r} field")
        return cls(size1, size2, root1, root2, path)


def entry_fields(index: int, label: str, text: str | None, vector_le_f32: bytes, prev_hash: bytes) -> dict:
    """The ``entry`` an inclusion proof carries: the fields its leaf is rebuilt from
    (``ocrr.ledger.verify.entry_bytes``)."""
    return {"id": index, "label": label, "text": text, "vector": b64(vector_le_f32), "prev_hash": b64(prev_hash)}
