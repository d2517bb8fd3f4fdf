"""The one ledger: a SHA-256 hash chain of (label, text, vector) entries, an RFC 6962 Merkle
tree beside it, a durable SQLite (WAL) store with group commit, signed tree heads and C2SP
checkpoints, verification and JSONL export/import.

``ocrr.ledger.verify`` is standalone (standard library only) so auditors can copy it; the
heavier parts are imported on first use.
"""

from __future__ import annotations

import importlib

from ocrr.ledger.chain import GENESIS, Entry, Ledger, VerifyResult, entry_digest

_LAZY = {
    "MerkleTree": "ocrr.ledger.merkle",
    "DurableLedger": "ocrr.ledger.store",
    "LedgerReport": "ocrr.ledger.store",
    "TreeHead": "ocrr.ledger.heads",
    "Signer": "ocrr.ledger.heads",
}

__all__ = ["GENESIS", "Entry", "Ledger", "VerifyResult", "entry_digest", *sorted(_LAZY)]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ocrr.ledger' has no attribute {name!r}")
