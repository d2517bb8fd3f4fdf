"""A verifying client of ``ocrr serve``: ``Client`` checks every checkpoint, proof and entry it
receives, remembers the last checkpoint it verified, and audits the log from its tiles."""

from ocrr.client.audit import AuditReport
from ocrr.client.checkpoints import Checkpoint
from ocrr.client.client import Client, Correction
from ocrr.client.errors import (
    AuditFailed,
    BadProof,
    BadSignature,
    ClientError,
    EntryMismatch,
    ForkDetected,
    IntegrityFailure,
    QuorumNotMet,
    RollbackDetected,
    ServiceRefused,
    ServiceUnavailable,
)

__all__ = [
    "Client",
    "Correction",
    "Checkpoint",
    "AuditReport",
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
