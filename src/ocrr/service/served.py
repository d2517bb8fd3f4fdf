"""What the service sends of the ledger's entries: only rows checked against what it holds.

``served_entries`` reads entries with ``ocrr.ledger.verified_read.read_verified``; a row that
does not match what the service holds makes it fail closed (``ServiceState.fail``: 503 with
the reason, ``/health`` 503, recorded for the other workers), and the request gets that 503
instead of the row. Storage that cannot be read is a 503 too, without failing closed.
"""

from __future__ import annotations

from fastapi import HTTPException

from ocrr.errors import LedgerIntegrityError, LedgerStorageError
from ocrr.ledger.proofs import InclusionProof
from ocrr.ledger.store import LedgerStore
from ocrr.ledger.verified_read import VerifiedEntry, read_verified
from ocrr.service.state import ServiceState


def served_entries(state: ServiceState, led: LedgerStore, lo: int, hi: int) -> list[VerifiedEntry]:
    """Entries ``lo``..``hi - 1`` of ``led`` (``hi`` at most what it holds), each verified."""
    try:
        return read_verified(led, led, lo, hi)
    except LedgerIntegrityError as e:
        state.fail({"ok": False, "size": len(led), "first_bad": e.first_bad, "reason": e.reason})
        raise HTTPException(503, state.damage_reason()) from None
    except LedgerStorageError as e:
        raise HTTPException(503, str(e)) from None


def served_inclusion_proof(led: LedgerStore, index: int, size: int | None) -> InclusionProof:
    """Entry ``index``'s inclusion proof in the log of ``size`` entries (None: all it holds), or
    a 404 naming the range to ask for. The caller holds ``led``'s read lock."""
    n = len(led) if size is None else size
    if not 0 <= index < n <= len(led):
        raise HTTPException(
            404,
            f"no entry {index} in a log of size {n} (the ledger holds {len(led)}); "
            "ask for 0 <= index < size <= the ledger's size",
        )
    return InclusionProof.of(led.tree, index, n)
