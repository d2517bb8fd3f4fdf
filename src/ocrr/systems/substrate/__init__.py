"""The substrate family: the hash-chained ledger with the k-NN margin-band vote (``core``), its
static, bounded and noise-robust variants, and the persistent substrate the service serves."""

from ocrr.index.options import INDEX_OPTIONS
from ocrr.systems.substrate.core import SearchIndex, Substrate

__all__ = ["INDEX_OPTIONS", "SearchIndex", "Substrate"]
