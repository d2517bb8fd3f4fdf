"""The RFC 6962 tree and its standalone verifier: shared test vectors, every (i, m, n)
up to 64 against a tree recomputed from scratch, and the verifier's independence."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ocrr.ledger import GENESIS, entry_digest, merkle
from ocrr.ledger.columns import PrefixedBytes
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.verify import (
    EMPTY_ROOT,
    HASH_SIZE,
    ProofError,
    entry_bytes,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

# transparency-dev/merkle's testdata (Apache-2.0): OCRR_TESTVECTORS_DIR names a folder holding rfc6962/
VECTORS = Path(os.environ.get("OCRR_TESTVECTORS_DIR", "")).expanduser() / "rfc6962"
HAVE_VECTORS = bool(os.environ.get("OCRR_TESTVECTORS_DIR")) and VECTORS.is_dir()


def _cases(kind: str) -> list[Path]:
    return sorted((VECTORS / kind).rglob("*.json")) if HAVE_VECTORS else []


def _b64(s: str) -> bytes:
    return base64.b64decode(s)


needs_vectors = pytest.mark.skipif(
    not HAVE_VECTORS,
    reason="needs the RFC 6962 test vectors: set OCRR_TESTVECTORS_DIR to a folder holding rfc6962/ "
    "(the testdata folder of transparency-dev/merkle)",
)


@needs_vectors
@pytest.mark.parametrize("path", _cases("inclusion"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_inclusion_vectors(path):
    case = json.loads(path.read_text())
    proof = [_b64(p) for p in case["proof"] or []]
    args = (case["leafIdx"], case["treeSize"], _b64(case["leafHash"]), proof, _b64(case["root"]))
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@needs_vectors
@pytest.mark.parametrize("path", _cases("consistency"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_consistency_vectors(path):
    case = json.loads(path.read_text())
    proof = [_b64(p) for p in case["proof"] or []]
    args = (case["size1"], case["size2"], proof, _b64(case["root1"]), _b64(case["root2"]))
    if case["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


@needs_vectors
def test_all_vectors_found():
    assert len(_cases("inclusion")) + len(_cases("consistency")) == 196


# -- a tree recomputed from scratch, straight from RFC 6962's recursive definitions ------
def _mth(leaves: list[bytes]) -> bytes:
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return _path(m, leaves[:k]) + [_mth(leaves[k:])]
    return _path(m - k, leaves[k:]) + [_mth(leaves[:k])]


def _subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if whole else [_mth(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return _subproof(m, leaves[:k], whole) + [_mth(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [_mth(leaves[:k])]


N = 64
LEAVES = [leaf_hash(f"entry {i}".encode()) for i in range(N)]


@pytest.fixture(scope="module")
def tree():
    t = MerkleTree()
    for leaf in LEAVES:
        t.append(leaf)
    return t


def test_roots_match_recomputation(tree):
    for n in range(N + 1):
        assert tree.root(n) == _mth(LEAVES[:n])


def test_every_inclusion_proof_up_to_64(tree):
    for n in range(1, N + 1):
        root = _mth(LEAVES[:n])
        for i in range(n):
            proof = tree.inclusion_proof(i, n)
            assert proof == _path(i, LEAVES[:n])
            verify_inclusion(i, n, LEAVES[i], proof, root)
            with pytest.raises(ProofError):  # another leaf at the same place is rejected
                verify_inclusion(i, n, LEAVES[(i + 1) % N], proof, root)


def test_proofs_made_together_equal_each_made_alone(tree):
    """``inclusion_proofs`` (a group commit's answer) is exactly ``inclusion_proof`` per entry:
    every index of every size up to 64, out of order and repeated, and a block at the right
    edge of a larger tree whose sizes are not powers of two."""
    for n in range(1, N + 1):
        indices = list(range(n))
        assert tree.inclusion_proofs(indices, n) == [tree.inclusion_proof(i, n) for i in indices]
        mixed = [n - 1, 0, n // 2, n - 1]
        assert tree.inclusion_proofs(mixed, n) == [tree.inclusion_proof(i, n) for i in mixed]
    big = MerkleTree()
    for i in range(1500):
        big.append(leaf_hash(i.to_bytes(4, "little")))
    for size in (1500, 1024, 1025, 1279):
        block = list(range(size - 256, size))
        assert big.inclusion_proofs(block, size) == [big.inclusion_proof(i, size) for i in block]
        scattered = [int(i) for i in np.random.default_rng(size).integers(0, size, 300)]  # repeats too
        assert big.inclusion_proofs(scattered, size) == [big.inclusion_proof(i, size) for i in scattered]
    assert big.inclusion_proofs([]) == []
    with pytest.raises(IndexError):
        tree.inclusion_proofs([3, 64], 64)


def test_leaves_added_together_build_the_tree_appending_each_builds():
    """``extend`` (a group commit's leaves, a level at a time) gives the levels ``append``
    gives one leaf at a time, from every kind of start and group size, and returns the same
    nodes, as runs: the leaves in order, then the parents level by level. A leaf of the wrong
    size is refused before anything is added."""
    leaves = [leaf_hash(i.to_bytes(4, "little")) for i in range(700)]
    rng = np.random.default_rng(11)
    starts = [0, 1, 2, 3, 63, 64, 65, 255, 256, 511] + [int(x) for x in rng.integers(0, 500, 10)]
    for start in starts:
        for count in (0, 1, 2, 3, 64, 65, 189):
            one_by_one, together = MerkleTree(), MerkleTree()
            for leaf in leaves[:start]:
                one_by_one.append(leaf)
            together.extend(leaves[:start])
            nodes = [node for leaf in leaves[start : start + count] for node in one_by_one.append(leaf)]
            runs = together.extend(leaves[start : start + count])
            assert together.levels == one_by_one.levels
            assert [level for level, _, _ in runs] == list(range(len(runs)))  # one run a level, bottom up
            got = [(level, lo + j, run[32 * j : 32 * j + 32]) for level, lo, run in runs for j in range(len(run) // 32)]
            assert got == sorted(nodes, key=lambda node: node[0])  # level by level, each level in order
    # levels that start with shared read-only bytes (ocrr.service.shared_rows) take leaves alike
    plain = MerkleTree.from_leaves(b"".join(leaves[:300]))
    shared = MerkleTree()
    shared.levels = [PrefixedBytes(bytes(level)) for level in plain.levels]
    assert shared.extend(leaves[300:471]) == plain.extend(leaves[300:471])
    assert [bytes(level) for level in shared.levels] == plain.levels
    assert shared.leaves_and_proofs(range(250, 471)) == plain.leaves_and_proofs(range(250, 471))
    tree = MerkleTree.from_leaves(b"".join(leaves[:5]))
    with pytest.raises(ValueError, match="a leaf hash is 32 bytes, got 31"):
        tree.extend([leaves[5], leaves[6][:31]])
    assert tree.levels == MerkleTree.from_leaves(b"".join(leaves[:5])).levels


def _leaves_and_proofs_one_by_one(tree: MerkleTree, indices, size: int) -> tuple[list, list]:
    return [tree.node(0, i) for i in indices], [tree.inclusion_proof(i, size) for i in indices]


def test_a_run_of_entries_gets_each_entrys_own_leaf_and_proof(tree):
    """``leaves_and_proofs`` of a ``range`` (a group commit's entries, made a shorter way) is
    exactly each entry's leaf and ``inclusion_proof``: every run of every size up to 64, and
    runs at the right edge and inside a larger tree; each proof is a list of its own."""
    for n in range(1, N + 1):
        each_leaf, each_proof = _leaves_and_proofs_one_by_one(tree, range(n), n)
        for lo in range(n):
            for hi in range(lo + 1, n + 1):
                leaves, proofs = tree.leaves_and_proofs(range(lo, hi), n)
                assert (leaves, proofs) == (each_leaf[lo:hi], each_proof[lo:hi])
                assert len({id(p) for p in proofs}) == len(proofs)
    big = MerkleTree()
    big.extend([leaf_hash(i.to_bytes(4, "little")) for i in range(1500)])
    for size in (1500, 1024, 1025, 1279, 1):
        for run in (range(max(size - 256, 0), size), range(size // 3, size // 3 + 1), range(0, size)):
            assert big.leaves_and_proofs(run, size) == _leaves_and_proofs_one_by_one(big, run, size)
            assert big.leaves_and_proofs(run, size) == big.leaves_and_proofs(list(run), size)
    assert big.leaves_and_proofs(range(5, 5)) == ([], [])
    for outside in (range(3, 65), range(-1, 3), range(64, 65)):
        with pytest.raises(IndexError, match="outside a log of size 64"):
            tree.leaves_and_proofs(outside, 64)


def test_nodes_encoded_together_are_each_node_encoded(tree):
    """``encode_all`` gets the answer's distinct nodes at once and its values stand where the
    nodes do, for a run and for any list of entries."""
    size = 50
    calls = []

    def hex_all(joined: bytes) -> list[str]:
        calls.append(len(joined) // 32)
        return [joined[j : j + 32].hex() for j in range(0, len(joined), 32)]

    for indices in (range(13, 50), [49, 0, 7, 7, 31]):
        leaves, proofs = _leaves_and_proofs_one_by_one(tree, indices, size)
        assert tree.leaves_and_proofs(indices, size, hex_all) == (
            [leaf.hex() for leaf in leaves],
            [[node.hex() for node in proof] for proof in proofs],
        )
    assert len(calls) == 2  # one call per answer


def test_every_consistency_proof_up_to_64(tree):
    roots = [_mth(LEAVES[:n]) for n in range(N + 1)]
    for n in range(1, N + 1):
        for m in range(1, n + 1):
            proof = tree.consistency_proof(m, n)
            assert proof == _subproof(m, LEAVES[:n], True)
            verify_consistency(m, n, proof, roots[m], roots[n])
            if m < n:  # a different old root (a rewritten history) is rejected
                with pytest.raises(ProofError):
                    verify_consistency(m, n, proof, roots[m - 1] if m > 1 else LEAVES[1], roots[n])


def test_proofs_are_built_from_stored_nodes_in_log_hashes(tree, monkeypatch):
    """An inclusion or consistency proof of a 2**20-leaf-sized question costs O(log n)
    fresh hashes: count node_hash calls while proving in a tree of 1000 leaves."""
    import ocrr.ledger.merkle as merkle

    t = MerkleTree()
    for i in range(1000):
        t.append(leaf_hash(i.to_bytes(4, "little")))
    calls = []
    real = merkle.node_hash
    monkeypatch.setattr(merkle, "node_hash", lambda a, b: calls.append(1) or real(a, b))
    t.inclusion_proof(999, 1000)
    t.consistency_proof(999, 1000)
    t.root(1000)
    assert len(calls) <= 3 * 10


def test_bad_sizes_raise(tree):
    with pytest.raises(IndexError):
        tree.inclusion_proof(64, 64)
    with pytest.raises(IndexError):
        tree.consistency_proof(11, 10)
    with pytest.raises(IndexError):
        tree.root(65)


def test_every_tree_is_consistent_with_the_empty_one(tree):
    """RFC 9162 2.1.4: the proof from size 0 is empty, and the verifier accepts it."""
    assert tree.consistency_proof(0, 10) == []
    verify_consistency(0, 10, [], EMPTY_ROOT, tree.root(10))  # raises ProofError if refused


def test_truncate_restores_an_earlier_tree(tree):
    t = MerkleTree()
    for leaf in LEAVES[:37]:
        t.append(leaf)
    t.truncate(21)
    assert len(t) == 21 and t.root() == _mth(LEAVES[:21])
    for leaf in LEAVES[21:]:
        t.append(leaf)
    assert t.levels == tree.levels


def test_entry_bytes_is_the_chain_digest_preimage():
    vec = np.array([0.5, -1.25, 3.0], np.float32)
    for text in (None, "", "héllo"):
        pre = entry_bytes(7, "lbl", text, vec.astype("<f4").tobytes(), GENESIS)
        assert hashlib.sha256(pre).digest() == entry_digest(7, "lbl", text, vec, GENESIS)


def test_verifier_needs_only_the_standard_library(tmp_path):
    """Copied out of the package, the verifier runs in a bare interpreter."""
    src = Path(__file__).resolve().parents[2] / "src" / "ocrr" / "ledger" / "verify.py"
    copy = tmp_path / "verify.py"
    copy.write_text(src.read_text())
    code = (
        "import sys, importlib.util as u; s = u.spec_from_file_location('verify', sys.argv[1]);"
        "verify = u.module_from_spec(s); s.loader.exec_module(verify);"
        "verify.verify_inclusion(0, 1, verify.leaf_hash(b'x'), [], verify.leaf_hash(b'x'));"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'ocrr', 'cryptography'));"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code, str(copy)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("chunk_nodes", [1, 3, 64])
def test_from_leaves_builds_the_levels_appending_builds_whatever_its_chunk(monkeypatch, chunk_nodes):
    """``from_leaves`` hashes each level's parents a chunk at a time (bounded memory): the same
    levels as appending the leaves one by one, for sizes on and around the chunks' edges."""
    monkeypatch.setattr(merkle, "_CHUNK", chunk_nodes * HASH_SIZE)
    leaves = [hashlib.sha256(b"leaf %d" % i).digest() for i in range(300)]
    for n in (1, 2, 3, 5, 2 * chunk_nodes, 2 * chunk_nodes + 1, 4 * chunk_nodes - 1, 255, 256, 300):
        appended = MerkleTree()
        for leaf in leaves[:n]:
            appended.append(leaf)
        assert MerkleTree.from_leaves(b"".join(leaves[:n])).levels == appended.levels


def test_from_leaves_takes_a_bytearray_it_owns_without_copying_it():
    leaves = bytearray(b"".join(hashlib.sha256(b"leaf %d" % i).digest() for i in range(37)))
    tree = MerkleTree.from_leaves(leaves, own=True)
    assert tree.levels[0] is leaves
    assert tree.levels == MerkleTree.from_leaves(bytes(leaves)).levels
    with pytest.raises(TypeError, match="takes a bytearray"):
        MerkleTree.from_leaves(bytes(leaves), own=True)
