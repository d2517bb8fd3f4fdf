"""The one ledger: a SHA-256 hash chain of (label, text, vector) entries, an RFC 6962 Merkle
tree beside it, one file format (SQLite in WAL mode) written by ``Ledger.open``/``save`` and
by the durable store with group commit, signed tree heads and C2SP checkpoints,
verification and JSONL export/import. docs/ledger.md describes the file and its guarantees.

Modules, bottom to top: ``verify`` (standalone, standard library only, so auditors can
copy it), ``chain`` (the in-memory chain), ``merkle``, ``scan`` (the file format and its
check), ``store`` (``DurableLedger``), ``file`` (``Ledger``: the chain with its file),
``transfer`` (export/import) and ``heads`` (signed heads and checkpoints).

The same log can live in PostgreSQL instead (the ``postgres`` extra; docs/postgres.md):
``postgres_schema`` (tables, append-only triggers, roles), ``postgres_scan`` (its check),
``postgres`` (``PostgresLedger``, a ``DurableLedger`` whose appends are serialised on a head
row), ``postgres_follow`` (replicas following the log) and ``postgres_transfer`` (import).
``location`` opens either store from a path or a ``postgresql://`` URL.
"""

from __future__ import annotations

from ocrr.ledger.chain import GENESIS, Chain, Entry, VerifyResult, entry_digest
from ocrr.ledger.file import Ledger, migrate
from ocrr.ledger.heads import Signer, TreeHead
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.store import DurableLedger

__all__ = [
    "GENESIS",
    "Chain",
    "DurableLedger",
    "Entry",
    "Ledger",
    "LedgerReport",
    "MerkleTree",
    "Signer",
    "TreeHead",
    "VerifyResult",
    "entry_digest",
    "migrate",
]
