"""SignedState: a key never signs two roots for one size, across restarts and processes."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import random

import pytest

from ocrr.errors import LedgerIntegrityError
from ocrr.ledger.heads import Signer, TreeHead, verify_checkpoint
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.signed_state import FixedLog, SignedState, default_state_path, recorded_origin

ORIGIN = "example.com/signed-state-test"


def tree_of(n: int, fork_at: int | None = None) -> MerkleTree:
    """n leaves; from ``fork_at`` on, other leaves than the honest log's."""
    tree = MerkleTree()
    for i in range(n):
        tag = "fork" if fork_at is not None and i >= fork_at else "log"
        tree.append(hashlib.sha256(f"{tag}-{i}".encode()).digest())
    return tree


def head(tree: MerkleTree, size: int | None = None) -> TreeHead:
    size = len(tree) if size is None else size
    return TreeHead(size, tree.root(size), b"\0" * 32, 0)


class Growing(FixedLog):
    """A held log that is behind: ``refresh`` takes in the rest of ``full`` (as a worker takes in
    what the others committed)."""

    def __init__(self, full: MerkleTree, have: int):
        super().__init__(tree_of(have))
        self.full, self.refreshed = full, 0

    def refresh(self) -> None:
        self.refreshed += 1
        self.tree = self.full


@pytest.fixture
def key(tmp_path):
    signer = Signer.generate(ORIGIN)
    path = tmp_path / "key.pem"
    signer.save(path)
    return Signer.load(path, ORIGIN), default_state_path(path)


def test_extension_is_signed_and_recorded_before_the_signature_leaves(key):
    signer, path = key
    state = SignedState.open(signer, path, FixedLog(tree_of(5)), log=lambda m: None)
    assert path.exists() and state.last_signed() == (5, tree_of(5).root())
    grown = FixedLog(tree_of(9))
    signed = state.sign_head(head(grown.tree), grown)
    assert verify_checkpoint(signed["checkpoint"], signer.vkey)[1:] == (9, grown.tree.root())
    # a fresh reader (another process, a restart) sees the size on disk already
    assert SignedState(signer, path).last_signed() == (9, grown.tree.root())
    # an older size of the same log is still signed (a client may ask for it), the record stays
    note = state.checkpoint(3, grown.tree.root(3), grown)
    assert verify_checkpoint(note, signer.vkey)[1] == 3
    assert SignedState(signer, path).last_signed()[0] == 9


def test_rewound_ledger_is_refused_at_start_and_when_signing(key):
    signer, path = key
    full = FixedLog(tree_of(8))
    SignedState.open(signer, path, full, log=lambda m: None).sign_head(head(full.tree), full)
    older = FixedLog(tree_of(5))
    with pytest.raises(LedgerIntegrityError, match="rewound") as refused:
        SignedState.open(signer, path, older, log=lambda m: None)
    message = str(refused.value)
    assert "size 8" in message and "Restore the newer copy" in message and "move" in message
    state = SignedState(signer, path)
    with pytest.raises(LedgerIntegrityError, match="rewound"):
        state.sign_head(head(older.tree), older)
    with pytest.raises(LedgerIntegrityError):
        state.checkpoint(5, older.tree.root(), older)


def test_fork_at_the_same_size_is_refused_naming_both_roots(key):
    signer, path = key
    honest = FixedLog(tree_of(8))
    SignedState.open(signer, path, honest, log=lambda m: None).sign_head(head(honest.tree), honest)
    forked = FixedLog(tree_of(8, fork_at=6))
    with pytest.raises(LedgerIntegrityError, match="forked") as refused:
        SignedState.open(signer, path, forked, log=lambda m: None)
    import base64

    for root in (honest.tree.root(), forked.tree.root()):
        assert base64.b64encode(root).decode() in str(refused.value)
    # nor any larger head of the forked log, nor a smaller one past the fork
    longer = FixedLog(tree_of(12, fork_at=6))
    state = SignedState(signer, path)
    with pytest.raises(LedgerIntegrityError, match="forked"):
        state.sign_head(head(longer.tree), longer)
    for size in (7, 6):  # even before the fork: this tree cannot show that it reaches the signed head
        with pytest.raises(LedgerIntegrityError):
            state.checkpoint(size, longer.tree.root(size), longer)
    assert state.last_signed() == (8, honest.tree.root())


def test_edited_or_foreign_record_is_refused(key, tmp_path):
    signer, path = key
    log = FixedLog(tree_of(4))
    SignedState.open(signer, path, log, log=lambda m: None)
    good = path.read_bytes()

    path.write_bytes(good.replace(b"\n4\n", b"\n2\n"))  # rewound by hand: the signature no longer verifies
    with pytest.raises(LedgerIntegrityError, match="edited"):
        SignedState.open(signer, path, log, log=lambda m: None)

    other = Signer.generate(ORIGIN)  # a record another key signed
    foreign = tmp_path / "foreign.signed"
    SignedState.open(other, foreign, log, log=lambda m: None)
    path.write_bytes(foreign.read_bytes())
    with pytest.raises(LedgerIntegrityError, match="another key"):
        SignedState.open(signer, path, log, log=lambda m: None)

    path.write_bytes(b"not a note")
    with pytest.raises(LedgerIntegrityError, match="--signed-state"):
        SignedState.open(signer, path, log, log=lambda m: None)

    path.write_bytes(good)  # the real record again: accepted
    assert SignedState.open(signer, path, log, log=lambda m: None).last_signed() == (4, log.tree.root())


def test_a_started_record_names_the_keys_origin_and_refuses_another(key, tmp_path):
    signer, path = key
    assert recorded_origin(signer, path) is None  # no record yet
    SignedState.start(signer, path)
    elsewhere = Signer.load(tmp_path / "key.pem", "example.com/elsewhere")  # the same key, another log
    assert recorded_origin(elsewhere, path) == ORIGIN
    assert recorded_origin(Signer.generate(ORIGIN), path) is None  # another key: not its record
    with pytest.raises(LedgerIntegrityError) as refused:
        SignedState.check_record(elsewhere, path)  # as `ocrr serve` checks it at the door
    assert str(refused.value) == (
        f"the record of signed heads {path} is refused: it is signed by another key or for another log (this "
        f"key signs for the log {ORIGIN}, not example.com/elsewhere); pass --origin {ORIGIN}, or make a key for "
        "example.com/elsewhere with `ocrr ledger keygen NEW.pem --origin example.com/elsewhere`"
    )
    log = FixedLog(tree_of(6))  # every log extends the empty one the record starts at
    state = SignedState.open(signer, path, log, log=lambda m: None)
    assert verify_checkpoint(state.sign_head(head(log.tree), log)["checkpoint"], signer.vkey)[1] == 6
    assert recorded_origin(elsewhere, path) == ORIGIN


def test_record_replaced_while_running_is_read_again(key):
    signer, path = key
    log = FixedLog(tree_of(10))
    state = SignedState.open(signer, path, FixedLog(tree_of(4)), log=lambda m: None)
    state.sign_head(head(log.tree), log)
    path.unlink()
    with pytest.raises(LedgerIntegrityError, match="removed"):
        state.sign_head(head(log.tree), log)


def test_a_signer_behind_the_record_takes_in_the_others_entries_first(key):
    signer, path = key
    full = tree_of(10)
    SignedState.open(signer, path, FixedLog(full), log=lambda m: None).checkpoint(10, full.root(), FixedLog(full))
    behind = Growing(full, 6)  # another worker signed 10; this one holds 6 so far
    state = SignedState(signer, path)
    assert state.checkpoint(6, full.root(6), behind)
    assert behind.refreshed == 1
    # a process that opens while behind takes the others' entries in too, rather than cry "rewound"
    late = Growing(full, 7)
    SignedState.open(signer, path, late, log=lambda m: None)
    assert late.refreshed == 1


def _sign_in_turn(path: str, signer_pem: str, fork_at: int | None, seed: int, out) -> None:
    """One process: sign checkpoints of sizes 1..40 in random order; report what it signed."""
    signer = Signer.load(signer_pem, ORIGIN)
    log = FixedLog(tree_of(40, fork_at))
    state = SignedState(signer, path)
    signed = []
    sizes = list(range(1, 41))
    random.Random(seed).shuffle(sizes)
    for size in sizes:
        try:
            note = state.checkpoint(size, log.tree.root(size), log)
        except LedgerIntegrityError:
            continue
        signed.append(verify_checkpoint(note, signer.vkey)[1:])
    out.put(signed)


def test_concurrent_processes_never_sign_two_roots_for_one_size(tmp_path):
    pem = tmp_path / "key.pem"
    Signer.generate(ORIGIN).save(pem)
    path = tmp_path / "key.pem.signed"
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    # two processes hold the honest log, two a fork of it from entry 10, all signing at once
    procs = [
        ctx.Process(target=_sign_in_turn, args=(str(path), str(pem), fork, seed, out))
        for seed, fork in enumerate((None, None, 10, 10))
    ]
    for p in procs:
        p.start()
    signed = [pair for _ in procs for pair in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    roots: dict[int, set[bytes]] = {}
    for size, root in signed:
        roots.setdefault(size, set()).add(root)
    assert {size for size, got in roots.items() if len(got) > 1} == set()
    # and one log: heads past the fork were signed of the honest log or of the fork, not both
    honest, fork = tree_of(40), tree_of(40, fork_at=10)
    past = {(size, root) for size, root in signed if size > 10}
    assert not (
        any(root == honest.root(size) for size, root in past) and any(root == fork.root(size) for size, root in past)
    )
    assert len(roots) >= 10  # the shared prefix is signed by everyone
