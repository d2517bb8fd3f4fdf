"""A verifying client of ``ocrr serve``: ``Client`` checks every checkpoint, proof and entry it
receives, remembers the last checkpoint it verified, and audits the log from its tiles."""

from ocrr.client import errors
from ocrr.client.audit import AuditReport
from ocrr.client.checkpoints import Checkpoint
from ocrr.client.client import Client, Correction
from ocrr.client.errors import *  # noqa: F403  (every error type the client raises)

__all__ = ["Client", "Correction", "Checkpoint", "AuditReport", *errors.__all__]
