"""``make_index(kind, dim, **params)``: one entry point for every search backend.

Kinds (all share the interface of ExactIndex: add, remove, search(queries, k, start=0),
epoch, ids, vectors, len, plus ``exact``, ``supports_start``, ``nbytes``, ``name``):

=============  ==========================================================================
``exact``      numpy brute force, float32, 100 % recall (ExactIndex; ``source=`` borrows
               a buffer such as the ledger's instead of copying)
``hnsw``       FAISS IndexHNSWFlat, inner product, id-mapped, tombstone removal
``auto``       exact until ``threshold`` entries (default 200 000), then ``ivf_pq``
               trained on everything stored (the reason is logged; ocrr.index.auto)
``exact_sq8``  FAISS IndexScalarQuantizer QT_8bit: exhaustive scan of 8-bit codes
``certified_sq8``  the same scan, re-ranked from float32 with a proof that the answer is
               ``exact``'s (else a full scan): exact at a quarter of the scanned bytes
               (ocrr.index.certified)
``hnsw_sq8``   FAISS IndexHNSWSQ QT_8bit: HNSW over 8-bit codes
``auto_sq8``   auto, switching to ivf_sq8
``ivf``        FAISS IndexIVFFlat + exact re-rank (ocrr.index.ivf)
``ivf_sq8``    FAISS IndexIVFScalarQuantizer QT_8bit + exact re-rank
``ivf_pq``     FAISS IndexIVFPQFastScan, 4-bit PQ + exact re-rank
=============  ==========================================================================

``compress="sq8"`` is the same as the ``_sq8`` suffix. HNSW parameters: ``m`` (alias
``hnsw_m``, default 16), ``ef_construction`` (200), ``ef_search`` (64); removal:
``rebuild_fraction`` (0.25); sq8: ``min_train`` (4096), ``sq_range_expand`` (0.5). IVF
parameters: ``nlist`` (0 = automatic), ``nprobe`` (16), ``rerank`` (100), ``pq_m``,
``target_recall`` (0 = no tuning), ``target_agreement`` with ``label_of`` and ``vote_rule``
(tune for the owner's vote; ocrr.index.ivf_tune), ``tune_queries``, ``tune_tolerance``,
``tune_k``, ``ivf_min_train`` (20 000), ``retrain_growth``,
``retune_growth``, ``train_per_list``, ``grouped_quantizer_from``, ``seed``; ``switch_to``
(auto kinds). Parameters that a kind does not use (e.g. ``ef_search`` for ``exact``) are
accepted and ignored, so one set of hyperparameters can be passed whatever the kind;
unknown names raise.

Adopting it (e.g. a kNN-LM datastore)::

    from ocrr.index import make_index
    self.index_ = make_index(self.index, dim, ef_search=self.ef_search)
    self.index_.add(vecs, ids)
    sims, ids = self.index_.search(queries, k)   # same contract as ExactIndex.search
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ocrr.index.auto import DEFAULT_THRESHOLD, AutoIndex
from ocrr.index.certified import CertifiedSQ8Index
from ocrr.index.exact import ExactIndex
from ocrr.index.faiss_index import FaissIndex
from ocrr.index.ivf import IVFIndex

KINDS = ("exact", "hnsw", "auto", "exact_sq8", "certified_sq8", "hnsw_sq8", "auto_sq8", "ivf", "ivf_sq8", "ivf_pq")
IVF_KINDS = ("ivf", "ivf_sq8", "ivf_pq")
HNSW_DEFAULTS = {"m": 16, "ef_construction": 200, "ef_search": 64}
_FAISS_PARAMS = ("m", "ef_construction", "ef_search", "min_train", "rebuild_fraction", "sq_range_expand")
_IVF_PARAMS = (
    "nlist",
    "nprobe",
    "rerank",
    "pq_m",
    "target_recall",
    "tune_k",
    "ivf_min_train",
    "retrain_growth",
    "retune_growth",
    "train_per_list",
    "grouped_quantizer_from",
    "seed",
    "target_agreement",
    "label_of",
    "vote_rule",
    "tune_queries",
    "tune_tolerance",
)


def split_params(params: dict) -> tuple[dict, dict]:
    """(HNSW/sq8 parameters, IVF parameters) of a mixed set, IVF names as IVFIndex takes them."""
    faiss_p = {k: v for k, v in params.items() if k in _FAISS_PARAMS}
    ivf_p = {k: v for k, v in params.items() if k in _IVF_PARAMS}
    if "ivf_min_train" in ivf_p:
        ivf_p["min_train"] = ivf_p.pop("ivf_min_train")
    return faiss_p, ivf_p


def make_index(
    kind: str = "exact",
    dim: int | None = None,
    *,
    compress: str | None = None,
    source: Callable[[], np.ndarray] | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    switch_to: str | None = None,
    **params: Any,
) -> ExactIndex | CertifiedSQ8Index | FaissIndex | IVFIndex | AutoIndex:
    """Build an empty search index of ``kind`` for ``dim``-dimensional unit vectors."""
    if dim is None or int(dim) < 1:
        raise ValueError(f"make_index needs a positive dim, got {dim!r}")
    if "hnsw_m" in params:
        params["m"] = params.pop("hnsw_m")
    if "hnsw_quantizer_from" in params:
        raise ValueError("make_index: hnsw_quantizer_from is now called grouped_quantizer_from; rename the parameter")
    unknown = set(params) - set(_FAISS_PARAMS) - set(_IVF_PARAMS)
    if unknown:
        raise ValueError(
            f"make_index: unknown parameter(s) {sorted(unknown)}; known: compress, source, "
            f"threshold, switch_to, {', '.join(_FAISS_PARAMS + _IVF_PARAMS)}, hnsw_m"
        )
    faiss_p, ivf_p = split_params(params)
    base = str(kind).lower()
    dim = int(dim)
    if base in IVF_KINDS:
        return IVFIndex(dim, base, source=source, **ivf_p)
    if base == "certified_sq8":
        sq = {k: v for k, v in faiss_p.items() if k in ("min_train", "sq_range_expand")}
        return CertifiedSQ8Index(dim, source=source, **sq)
    if base.endswith("_sq8"):
        base, compress = base[: -len("_sq8")], "sq8"
    if compress not in (None, "none", "sq8"):
        raise ValueError(f"compress must be None or 'sq8', got {compress!r}")
    compress = None if compress == "none" else compress
    if base == "ivf" and compress == "sq8":
        return IVFIndex(dim, "ivf_sq8", source=source, **ivf_p)
    if base not in ("exact", "hnsw", "auto"):
        raise ValueError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    if base == "exact":
        if compress == "sq8":
            return FaissIndex(dim, "exact_sq8", **faiss_p)
        return ExactIndex(dim, source=source)
    if base == "hnsw":
        return FaissIndex(dim, "hnsw_sq8" if compress == "sq8" else "hnsw", **faiss_p)
    return AutoIndex(
        dim,
        threshold=threshold,
        compress=compress,
        source=source,
        switch_to=switch_to,
        hnsw_params=faiss_p,
        ivf_params=ivf_p,
    )
