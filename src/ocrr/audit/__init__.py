"""The provable ledger: an RFC 6962 Merkle tree beside the hash chain, a durable SQLite
store with group commit, signed tree heads and C2SP checkpoints, JSONL export/import.

``verify`` is standalone (standard library only) so auditors can copy it; the rest is
imported on first use, so ``import ocrr.audit.verify`` pulls in nothing else.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "MerkleTree": "ocrr.audit.merkle",
    "DurableLedger": "ocrr.audit.store",
    "LedgerReport": "ocrr.audit.store",
    "TreeHead": "ocrr.audit.heads",
    "Signer": "ocrr.audit.heads",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'ocrr.audit' has no attribute {name!r}")
