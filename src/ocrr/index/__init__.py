"""Nearest-neighbour search backends over unit vectors (inner product = cosine)."""

from ocrr.index.exact import ExactIndex, top_k

__all__ = ["ExactIndex", "top_k"]
