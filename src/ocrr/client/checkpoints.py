"""Checkpoints the client accepts: signed by the log, cosigned by enough witnesses, and each
one an extension of the last one it holds.

``CheckpointVerifier.verify`` checks a signed C2SP checkpoint with the log's verifier key and,
when witnesses are configured, their cosignatures (``ocrr.ledger.cosignature.check_quorum``,
or any function of that shape passed in). ``check_extends`` then ties a new checkpoint to the
one held: a smaller one is a rollback, the same size with another root a fork, and a larger one
must come with a consistency proof (fetched from the service, checked here against the two
signed roots, never against the roots the proof carries).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ocrr.client.errors import BadSignature, ForkDetected, QuorumNotMet, RollbackDetected
from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import check_cosigner_vkey, check_quorum
from ocrr.ledger.heads import check_vkey, verify_checkpoint
from ocrr.ledger.proofs import ConsistencyProof, b64
from ocrr.ledger.verify import ProofError, verify_consistency

__all__ = ["Checkpoint", "CheckpointVerifier", "QuorumCheck", "check_extends"]

#: ``quorum_check(note, witness_vkeys, quorum) -> {witness vkey: unix time}``, raising an
#: OcrrError when fewer than ``quorum`` of the witnesses cosigned the note
#: (``ocrr.ledger.cosignature.check_quorum``).
QuorumCheck = Callable[[str, list[str], int], dict]
#: ``consistency(old_size, new_size)``: the service's /proof/consistency document.
ConsistencySource = Callable[[int, int], dict]


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint whose signature (and quorum, when required) the client checked."""

    origin: str
    size: int
    root: bytes
    note: str
    cosigners: tuple[tuple[str, int], ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "origin": self.origin,
            "size": self.size,
            "root": b64(self.root),
            "cosigners": [{"witness": name, "time": when} for name, when in self.cosigners],
            "checkpoint": self.note,
        }


class CheckpointVerifier:
    """Checks checkpoints with the log's ``vkey`` and ``quorum`` of the ``witnesses``' keys."""

    def __init__(
        self, vkey: str, witnesses: Sequence[str] = (), quorum: int = 0, quorum_check: QuorumCheck | None = None
    ):
        self.vkey = check_vkey(vkey)
        self.witnesses = tuple(check_cosigner_vkey(w) for w in witnesses)
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 0 <= quorum <= len(self.witnesses):
            raise OcrrError(
                f"quorum {quorum!r} must be an integer from 0 (no witness needed) to the number of witnesses "
                f"given ({len(self.witnesses)}); pass one --witness VKEY per witness"
            )
        self.quorum = quorum
        self._quorum_check = quorum_check
        self.origin = self.vkey.split("+", 1)[0]

    def verify(self, note: str, witnessed: bool = True) -> Checkpoint:
        """The checkpoint ``note`` if it verifies (and, with ``witnessed``, carries the quorum);
        BadSignature or QuorumNotMet otherwise."""
        if not isinstance(note, str):
            raise BadSignature(f"expected a signed note, got {type(note).__name__}", repr(note))
        try:
            origin, size, root = verify_checkpoint(note, self.vkey)
        except OcrrError as e:
            raise BadSignature(str(e), note) from None
        cosigners: tuple[tuple[str, int], ...] = ()
        if witnessed and self.quorum:
            cosigners = self._cosigners(note)
        return Checkpoint(origin, size, root, note, cosigners)

    def _cosigners(self, note: str) -> tuple[tuple[str, int], ...]:
        check = self._quorum_check or check_quorum
        try:
            got = check(note, list(self.witnesses), self.quorum)
        except QuorumNotMet:
            raise
        except OcrrError as e:
            raise QuorumNotMet(f"{e}; {self.quorum} of {len(self.witnesses)} needed", note) from None
        return tuple((vkey.split("+", 1)[0], int(when)) for vkey, when in got.items())


def check_extends(held: Checkpoint, new: Checkpoint, consistency: ConsistencySource) -> None:
    """Raise unless ``new`` extends ``held`` (the same log, grown or not): RollbackDetected when
    ``new`` is smaller, ForkDetected when it has another root at the same size or the service's
    consistency proof from ``held`` to ``new`` does not hold."""
    if new.size < held.size:
        raise RollbackDetected(
            f"rollback: the service presents a checkpoint of {new.size} entries, but it signed one of "
            f"{held.size} before (held in your state): it is serving an older copy of its log (restored "
            "from a backup?). Do not trust it; show both signed notes (the error's evidence) to its operator",
            held.note,
            new.note,
        )
    if new.size == held.size:
        if new.root != held.root:
            raise ForkDetected(
                f"fork: the log signed two different trees of {new.size} entries (the one in your state and "
                "the one served now): it shows different histories to different people, or its storage was "
                "replaced. Do not trust it; the two signed notes (the error's evidence) prove it",
                held.note,
                new.note,
            )
        return
    if held.size == 0:
        return  # every log extends the empty log
    doc = consistency(held.size, new.size)
    try:
        proof = ConsistencyProof.from_dict(doc)
        if (proof.size1, proof.size2) != (held.size, new.size):
            raise ProofError(f"the proof is not from {held.size} to {new.size}")
        verify_consistency(held.size, new.size, proof.path, held.root, new.root)  # the signed roots, not the proof's
    except ProofError as e:
        raise ForkDetected(
            f"fork: the service cannot prove that its checkpoint of {new.size} entries extends the one of "
            f"{held.size} you hold ({e}): its log is not the log you saw before. Do not trust it; the two "
            "signed notes (the error's evidence) show it",
            held.note,
            new.note,
        ) from None
