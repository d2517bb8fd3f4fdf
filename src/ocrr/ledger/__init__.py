"""The one ledger: a SHA-256 hash chain of (label, text, vector) entries, an RFC 6962 Merkle
tree beside it, kept durably by one of two engines, signed tree heads and C2SP checkpoints,
verification and JSONL export/import. docs/ledger.md describes the file and its guarantees.

The engine-neutral core, bottom to top: ``verify`` (standalone, standard library only, so
auditors can copy it), ``chain`` (the in-memory chain), ``merkle``, ``tiles``, ``heads``
(signed heads and checkpoints), ``checkpoint_records``, ``signed_state``, ``rows`` (the row
rules), ``scan`` (a check's report and the rules every row is checked by), ``tail``,
``verified_read``, ``group_commit``, ``held`` (``HeldLedger``: the tree, chain and mirror
every store holds, and the take-in of rows), ``store`` (``LedgerStore``, the protocol the
service uses) and ``transfer`` (the export format).

The engines, behind ``LedgerStore``: ``sqlite`` (``DurableLedger`` on a file, and ``Ledger``,
the chain with its file) and ``postgres`` (``PostgresLedger``, the ``postgres`` extra;
docs/postgres.md). ``location`` opens either from a path or a ``postgresql://`` URL, and is
the one module outside them that names both.
"""

from __future__ import annotations

from ocrr.ledger.chain import GENESIS, Chain, Entry, VerifyResult, entry_digest
from ocrr.ledger.heads import Signer, TreeHead
from ocrr.ledger.merkle import MerkleTree
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.sqlite.file import Ledger, migrate
from ocrr.ledger.sqlite.store import DurableLedger

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
