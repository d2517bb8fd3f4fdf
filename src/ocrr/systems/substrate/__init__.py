"""The substrate family: the hash-chained ledger with the k-NN margin-band vote (``core``), its
static, bounded and noise-robust variants, and the persistent substrate the service serves."""

from ocrr.systems.substrate.core import Substrate

__all__ = ["Substrate"]
