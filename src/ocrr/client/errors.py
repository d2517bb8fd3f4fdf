"""What a verifying client can find wrong, one class per failure.

Every class is an ``OcrrError``. ``IntegrityFailure`` and its subclasses mean the service
showed something that contradicts what it signed, what the client sent or what the client
saw before: the client refuses it (``ocrr client`` exits with status 1) and keeps the state
it held. The other classes (``ServiceUnavailable``, ``ServiceRefused``) say that nothing was
verified; the client stays where it was (exit status 2).
"""

from __future__ import annotations

from ocrr.errors import OcrrError

__all__ = [
    "ClientError",
    "IntegrityFailure",
    "BadSignature",
    "QuorumNotMet",
    "BadProof",
    "ForkDetected",
    "RollbackDetected",
    "EntryMismatch",
    "AuditFailed",
    "ServiceUnavailable",
    "ServiceRefused",
]


class ClientError(OcrrError):
    """Something the verifying client could not accept or could not do."""


class IntegrityFailure(ClientError):
    """The service showed something that cannot be true of an honest append-only log."""

    def evidence(self) -> dict:
        """What a person needs to show someone else (signed notes, sizes); JSON-ready."""
        return {}


class BadSignature(IntegrityFailure):
    """A checkpoint that does not verify with the log's verifier key."""

    def __init__(self, reason: str, note: str):
        super().__init__(
            f"the service's checkpoint does not verify with the log's key ({reason}): it is forged or "
            "altered on the way, or --vkey is not this log's key; nothing was accepted"
        )
        self.note = note

    def evidence(self) -> dict:
        return {"note": self.note}


class QuorumNotMet(IntegrityFailure):
    """A checkpoint without enough valid cosignatures of the configured witnesses."""

    def __init__(self, reason: str, note: str):
        super().__init__(
            f"the checkpoint is not cosigned by enough of your witnesses ({reason}): the log did not show "
            "it to them, or they refused it; ask the operator whether the witnesses are down, and do not "
            "rely on it until it is witnessed"
        )
        self.note = note

    def evidence(self) -> dict:
        return {"note": self.note}


class BadProof(IntegrityFailure):
    """An inclusion proof that does not lead to the signed root it must lead to."""

    def __init__(self, message: str, evidence: dict | None = None):
        super().__init__(message)
        self._evidence = evidence or {}

    def evidence(self) -> dict:
        return self._evidence


class _TwoNotes(IntegrityFailure):
    """A failure shown by two signed checkpoints: the one the client held and the one it was shown."""

    def __init__(self, message: str, held: str, seen: str):
        super().__init__(message)
        self.held_note, self.seen_note = held, seen

    def evidence(self) -> dict:
        return {"held_checkpoint": self.held_note, "seen_checkpoint": self.seen_note}


class ForkDetected(_TwoNotes):
    """Two signed checkpoints of one log that cannot both be true: the same size with two roots,
    or a larger one the service cannot prove extends the one held."""


class RollbackDetected(_TwoNotes):
    """The service presents as its latest a checkpoint smaller than one it signed before."""


class EntryMismatch(IntegrityFailure):
    """The log holds, for a correction the client sent, other bytes than the ones it sent."""

    def __init__(self, message: str, index: int, evidence: dict | None = None):
        super().__init__(message)
        self.index = index
        self._evidence = {"index": index, **(evidence or {})}

    def evidence(self) -> dict:
        return self._evidence


class AuditFailed(IntegrityFailure):
    """The tiles (or entry bundles) do not rebuild the tree the checkpoint signs."""

    def __init__(self, message: str, checkpoint: str, tile: str | None = None):
        super().__init__(message)
        self.note, self.tile = checkpoint, tile

    def evidence(self) -> dict:
        return {"checkpoint": self.note, "tile": self.tile}


class ServiceUnavailable(ClientError):
    """The service is unreachable, timed out, or answers 503 (it failed closed): nothing was verified."""


class ServiceRefused(ClientError):
    """The service refused the request (a 4xx: a bad token, a malformed item); its reason is in the message."""
