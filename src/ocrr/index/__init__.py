"""Nearest-neighbour search backends over unit vectors (inner product = cosine).

``make_index(kind, dim, **params)`` builds one: ``exact`` (numpy, 100 % recall),
``hnsw`` (FAISS HNSW), ``auto`` (exact, then HNSW past a threshold), and 8-bit
compressed variants ``exact_sq8``, ``hnsw_sq8``, ``auto_sq8``. See ocrr.index.factory.
"""

from ocrr.index.auto import AutoIndex
from ocrr.index.exact import ExactIndex, exact_search, top_k
from ocrr.index.factory import HNSW_DEFAULTS, KINDS, make_index
from ocrr.index.faiss_index import FaissIndex
from ocrr.index.recall import recall_at_k

__all__ = ["AutoIndex", "ExactIndex", "FaissIndex", "HNSW_DEFAULTS", "KINDS", "exact_search",
           "make_index", "recall_at_k", "top_k"]
