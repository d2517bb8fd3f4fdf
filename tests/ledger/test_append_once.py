"""The append path hashes each entry once: the mirror (a plain Chain, or a substrate's
ledger) takes the chain hashes the store computed, and a group's Merkle leaves go into the
tree together. Each shortcut gives what the long way gives: the same nodes, the same rows
and tree in storage, the same hashes, heads, roots and proofs in memory."""

from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pytest

from ocrr.errors import OcrrError
from ocrr.ledger.chain import Chain
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.proofs import InclusionProof, b64, b64_nodes
from ocrr.ledger.rows import check_rows
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.ledger.verify import entry_bytes, leaf_hash
from ocrr.systems.substrate.persistent import open_substrate


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _leaves(lo: int, hi: int) -> list[bytes]:
    return [hashlib.sha256(i.to_bytes(8, "little")).digest() for i in range(lo, hi)]


@pytest.mark.parametrize("start", [0, 1, 5, 64, 255])
@pytest.mark.parametrize("count", [1, 2, 7, 64, 300])
def test_extend_gives_the_nodes_of_appending_one_by_one(start, count):
    one, many = MerkleTree(), MerkleTree()
    for leaf in _leaves(0, start):
        one.append(leaf)
    many.extend(_leaves(0, start))
    appended = [node for leaf in _leaves(start, start + count) for node in one.append(leaf)]
    # the same nodes, as one run per level (leaves first), each level in order
    runs = many.extend(_leaves(start, start + count))
    nodes = [(level, lo + j, run[32 * j : 32 * (j + 1)]) for level, lo, run in runs for j in range(len(run) // 32)]
    assert nodes == sorted(appended, key=lambda node: node[0])
    assert many.levels == one.levels
    assert many.root() == one.root()


def test_extend_refuses_a_leaf_of_the_wrong_size():
    with pytest.raises(ValueError, match="32 bytes"):
        MerkleTree().extend([b"short"])


def _groups():
    """Groups of corrections as a service takes them: one, a few, a full request."""
    vecs, at = _unit(400, 8, 3), 0
    for size in (1, 3, 256, 1, 139):
        ids = range(at, at + size)
        yield vecs[at : at + size], [f"label {i % 5}" for i in ids], [f"text {i}" for i in ids]
        at += size


def _stored(path) -> tuple[list, list]:
    conn = sqlite3.connect(path)
    try:
        entries = conn.execute("SELECT id, label, text, vector, prev_hash, hash FROM entries ORDER BY id").fetchall()
        nodes = conn.execute("SELECT level, idx, hash FROM nodes ORDER BY level, idx").fetchall()
        return entries, nodes
    finally:
        conn.close()


def _expected(groups) -> tuple[list, list, Chain]:
    """The rows, tree nodes and chain of the groups, each entry hashed the long way."""
    chain, tree, rows, nodes = Chain(8), MerkleTree(), [], []
    for vecs, labels, texts in groups:
        chain.extend(vecs, labels, texts)
    for e in chain:
        raw = e.vector.astype("<f4").tobytes()
        rows.append((e.id, e.label, e.text, raw, e.prev_hash, e.hash))
        nodes.extend(tree.append(leaf_hash(entry_bytes(e.id, e.label, e.text, raw, e.prev_hash))))
    return rows, sorted(nodes), chain


def test_a_durable_store_stores_and_mirrors_what_hashing_every_entry_gives(tmp_path):
    groups = list(_groups())
    rows, nodes, chain = _expected(groups)
    path = tmp_path / "l.db"
    with DurableLedger.open(path, dim=8) as led:
        for vecs, labels, texts in groups:
            led.extend(vecs, labels, texts)
        mirror = led.memory
        assert mirror is not None
        assert [(e.id, e.label, e.text, e.prev_hash, e.hash) for e in mirror] == [
            (e.id, e.label, e.text, e.prev_hash, e.hash) for e in chain
        ]
        assert mirror.vectors.tobytes() == chain.vectors.tobytes()
        assert mirror.verify(chain.head)  # the hashes it took are the ones its fields give
        tree = MerkleTree()
        tree.extend([n for level, _, n in nodes if level == 0])
        assert led.root() == tree.root()
        assert [led.inclusion_proof(i) for i in range(len(led))] == [tree.inclusion_proof(i) for i in range(len(led))]
        assert led.consistency_proof(1) == tree.consistency_proof(1)
    assert _stored(path) == (rows, nodes)
    with DurableLedger.open(path) as again:  # a full check of the file, rehashing every entry
        assert again.report and again.chain_head == chain.head


def test_a_substrate_learns_committed_entries_with_the_chain_the_file_holds(tmp_path):
    groups = list(_groups())
    _, _, chain = _expected(groups)
    path = tmp_path / "s.db"
    with open_substrate(path, dim=8) as sub:
        for vecs, labels, texts in groups:
            sub.correct(vecs, labels, texts)
        held = sub.system.ledger_
        assert [(e.id, e.label, e.text, e.prev_hash, e.hash) for e in held] == [
            (e.id, e.label, e.text, e.prev_hash, e.hash) for e in chain
        ]
        assert held.verify(chain.head)
        answers = sub.predict(_unit(20, 8, 9))
        assert sub.verify()
    with open_substrate(path) as again:  # rebuilt from the file, every entry hashed by the substrate
        assert again.system.ledger_.head == chain.head
        assert again.predict(_unit(20, 8, 9)) == answers


def test_an_apply_of_three_arguments_is_still_fed(tmp_path):
    chain = Chain(8)

    def apply(vecs, labels, texts):  # written before stores handed over their hashes
        chain.extend(vecs, labels, texts)
        return chain.head

    with DurableLedger.open(tmp_path / "a.db", dim=8, apply=apply) as led:
        for vecs, labels, texts in _groups():
            led.extend(vecs, labels, texts)
        assert len(chain) == 400
        assert led.chain_head == chain.head


def test_a_group_commits_proof_documents_are_each_proofs_own():
    tree = MerkleTree()
    tree.extend(_leaves(0, 300))
    ids = list(range(37, 300))
    found = [(i, tree.node(0, i), p) for i, p in zip(ids, tree.inclusion_proofs(ids, 300))]
    expected = [InclusionProof.of(tree, i, 300).to_dict() for i in ids]
    assert InclusionProof.documents(300, tree.root(300), found) == expected
    encoded = [(i, b64(tree.node(0, i)), p) for i, p in zip(ids, tree.inclusion_proofs(ids, 300, b64))]
    assert InclusionProof.documents(300, tree.root(300), encoded, encoded=True) == expected


def test_a_stores_proofs_encoded_once_are_its_proofs_encoded(tmp_path):
    """``head_with_proofs(ids, b64)`` (the service's answer) hands out exactly the base64 of
    ``head_with_proofs(ids)``'s leaves and nodes, at the same head."""
    with DurableLedger.open(tmp_path / "p.db", dim=8) as led:
        for vecs, labels, texts in _groups():
            led.extend(vecs, labels, texts)
        ids = range(len(led) - 77, len(led))
        size, root, chain, found = led.head_with_proofs(ids)
        size2, root2, chain2, encoded = led.head_with_proofs(ids, b64)
        assert (size2, root2, chain2) == (size, root, chain)
        assert encoded == [(i, b64(leaf), [b64(n) for n in path]) for i, leaf, path in found]
        in_one_pass = led.head_with_proofs(ids, encode_all=b64_nodes)
        assert in_one_pass == (size, root, chain, encoded)
        assert led.head_with_proofs(list(ids), encode_all=b64_nodes) == in_one_pass


def test_the_row_rules_measure_norms_as_numpy_does():
    vecs = _unit(50, 384, 4)
    vecs[31] *= np.float32(1.0017)  # just past the tolerance
    expected = np.linalg.norm(vecs.astype(np.float64), axis=1)
    with pytest.raises(OcrrError, match=f"row 31 has norm {expected[31]:.4g}"):
        check_rows(vecs, 384, lambda i: f"row {i}")
    assert check_rows(vecs[:31], 384, lambda i: f"row {i}") is not None
