"""Nearest-neighbour search backends over unit vectors (inner product = cosine).

``make_index(kind, dim, **params)`` builds one: ``exact`` (numpy, 100 % recall),
``hnsw`` (FAISS HNSW), ``ivf``/``ivf_sq8``/``ivf_pq`` (FAISS inverted lists with an exact
re-rank, ocrr.index.ivf), ``auto`` (exact, then IVF past a threshold), and 8-bit
compressed variants ``exact_sq8``, ``hnsw_sq8``, ``auto_sq8``, and ``certified_sq8`` (an 8-bit
scan proven to give exact search's answer, ocrr.index.certified). See ocrr.index.factory.
"""

from ocrr.index.auto import AutoIndex
from ocrr.index.certified import CertifiedSQ8Index
from ocrr.index.exact import ExactIndex, exact_search, top_k
from ocrr.index.factory import HNSW_DEFAULTS, IVF_KINDS, KINDS, make_index
from ocrr.index.faiss_index import FaissIndex
from ocrr.index.ivf import IVFIndex
from ocrr.index.recall import recall_at_k

__all__ = [
    "AutoIndex",
    "CertifiedSQ8Index",
    "ExactIndex",
    "FaissIndex",
    "HNSW_DEFAULTS",
    "IVFIndex",
    "IVF_KINDS",
    "KINDS",
    "exact_search",
    "make_index",
    "recall_at_k",
    "top_k",
]
