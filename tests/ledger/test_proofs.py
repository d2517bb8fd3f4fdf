"""ocrr.ledger.proofs: proof documents read back as written, malformed ones refused naming
the field, and base64 with one spelling per value."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.proofs import ConsistencyProof, InclusionProof, b64, b64_nodes, unb64
from ocrr.ledger.verify import ProofError, leaf_hash, verify_consistency, verify_inclusion


def _tree(n: int) -> MerkleTree:
    tree = MerkleTree()
    for i in range(n):
        tree.append(leaf_hash(b"entry %d" % i))
    return tree


def test_proofs_read_from_a_tree_verify_and_come_back_from_their_json():
    tree = _tree(7)
    inclusion = InclusionProof.of(tree, 5, 6)
    verify_inclusion(5, 6, leaf_hash(b"entry 5"), inclusion.path, tree.root(6))
    assert InclusionProof.from_dict(inclusion.to_dict()) == inclusion
    consistency = ConsistencyProof.of(tree, 3, 7)
    verify_consistency(3, 7, consistency.path, tree.root(3), tree.root(7))
    assert ConsistencyProof.from_dict(consistency.to_dict()) == consistency
    assert list(consistency.to_dict()) == ["from", "to", "root_from", "root_to", "proof"]  # the wire order


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"root": None}, "'root' must be a JSON string"),
        ({"leaf_hash": "AAB="}, "canonical"),  # its unused bits are not zero: another spelling of "AAA="
        ({"proof": "AAAA"}, "'proof' must be a JSON array"),
        ({"index": True}, "'index' must be a JSON integer"),
        ({"size": -1}, "size must be a non-negative integer"),
    ],
)
def test_a_malformed_inclusion_document_is_refused_naming_its_field(change, complaint):
    doc = InclusionProof.of(_tree(3), 1, 3).to_dict()
    doc.update(change)
    with pytest.raises(ProofError, match=complaint):
        InclusionProof.from_dict(doc)


def test_base64_has_one_spelling_for_each_value():
    assert unb64(b64(b"\0\1\2\3")) == b"\0\1\2\3"
    for spelling in ("AAE", "AAF=", "AA E=", "AAE=\n", "ÀAE=", 7):  # unpadded, stray bits, space, newline, non-ASCII
        with pytest.raises(ProofError):
            unb64(spelling)


def test_hashes_encoded_in_one_pass_are_each_hash_encoded():
    """``b64_nodes`` (a batch's proofs in one pass) spells each 32-byte hash as ``b64`` does,
    whatever its last bytes (which share base64's last group with the padding)."""
    rng = np.random.default_rng(5)
    hashes = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)) for _ in range(300)]
    hashes += [b"\0" * 32, b"\xff" * 32, b"\0" * 31 + b"\x01", b"\xff" * 31 + b"\xfe"]
    assert b64_nodes(b"".join(hashes)) == [b64(h) for h in hashes]
    assert b64_nodes(b"") == []
    with pytest.raises(ValueError, match="32 bytes each"):
        b64_nodes(b"\0" * 33)


def test_a_consistency_document_without_a_root_is_refused():
    doc = ConsistencyProof.of(_tree(4), 2, 4).to_dict()
    del doc["root_to"]
    with pytest.raises(ProofError, match="no 'root_to' field"):
        ConsistencyProof.from_dict(doc)
    with pytest.raises(ProofError, match="JSON object"):
        ConsistencyProof.from_dict([doc])
