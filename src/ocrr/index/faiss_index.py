"""Approximate and compressed search with FAISS, behind ExactIndex's interface.

``FaissIndex`` wraps one of three FAISS indexes over unit vectors with inner product
(= cosine) as the metric:

* ``hnsw``      IndexHNSWFlat  (float32 vectors + HNSW graph; approximate)
* ``hnsw_sq8``  IndexHNSWSQ    (8-bit scalar-quantised vectors + HNSW graph)
* ``exact_sq8`` IndexScalarQuantizer (exhaustive scan of 8-bit codes; scores are
  approximate because the vectors are, so recall is high but not 1.0)

Ids. FAISS numbers vectors by insertion position; the wrapper keeps ``position -> id``
and returns the caller's int64 ids. Results follow ExactIndex.search's contract:
(sims float32 (n, k'), ids int64 (n, k')), k' = min(k, live entries), each row ordered
by similarity desc then id desc. If the approximate search finds fewer than k' live
neighbours for a row (possible with heavy filtering), the row is padded at the end
with sim = -inf and id = -1; the substrate's vote ignores such columns.

Removal. HNSW graphs cannot delete a node cheaply, so ``remove`` marks positions dead
(a tombstone bitmap) and every search passes a FAISS ``IDSelectorBitmap`` so dead
entries are never returned (FAISS still walks through them, which keeps the graph
connected). When dead entries exceed ``rebuild_fraction`` of the stored ones (default
0.25), the index is compacted: a fresh index is built from the live vectors, read back
from the FAISS storage (bit-exact for float32; for sq8 the codes decode and re-encode to
the same codes because the same trained quantiser is reused). ``epoch`` bumps on removal.

Training. 8-bit scalar quantisation (QT_8bit) learns a [min, max] range per dimension
and clips values outside it. Until ``min_train`` vectors have arrived they are held in
a small exact "staging" index (searched exactly and merged); then the quantiser is
trained on them and everything moves into FAISS. Streaming means it only sees the head
of the stream -- in a class-incremental stream, the first classes -- so each range is
widened by ``sq_range_expand`` (FAISS ``rangestat_arg``; default 0.5 = half the observed
width on each side). Measured on class-ordered clusters (tests, 32-d and 384-d): trained
on the first 5 % of the stream with no widening, top-1 agreement with exact search fell
to 0.71-0.76; with 0.5 it is 0.96-0.98, as good as training on a spread sample. Call
``train(sample)`` up front to train on a representative sample instead (``auto_sq8``
trains on an even spread of everything stored when it switches).

Determinism. With one OpenMP thread (``faiss.omp_set_num_threads(1)``) the same adds in
the same batches give the same graph and the same results. With several threads, HNSW
insertion order within a batch, and so the graph, can vary run to run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ocrr.index.exact import ExactIndex, rows_and_ids, top_k

KINDS = ("hnsw", "hnsw_sq8", "exact_sq8")

_ADD_CHUNK = 65_536  # rows per FAISS add / reconstruct call during compaction


def _faiss() -> Any:
    import faiss  # imported lazily: only approximate backends need it

    return faiss


def sq8_codes(dim: int, range_expand: float) -> Any:
    """An untrained FAISS flat index of 8-bit codes (QT_8bit, inner product), its per-dimension
    range widened by ``range_expand`` (``rangestat_arg``) beyond the training sample's."""
    faiss = _faiss()
    index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    index.sq.rangestat = faiss.ScalarQuantizer.RS_minmax
    index.sq.rangestat_arg = range_expand
    return index


class FaissIndex:
    """FAISS-backed index with id mapping, tombstone removal and optional sq8 compression."""

    supports_start = False  # FAISS cannot restrict a search to "rows added since r"

    def __init__(
        self,
        dim: int,
        kind: str = "hnsw",
        m: int = 16,
        ef_construction: int = 200,
        ef_search: int = 64,
        min_train: int = 4096,
        rebuild_fraction: float = 0.25,
        sq_range_expand: float = 0.5,
    ):
        if kind not in KINDS:
            raise ValueError(f"FaissIndex kind must be one of {KINDS}, got {kind!r}")
        if m < 2 or ef_construction < 1 or ef_search < 1:
            raise ValueError("need m >= 2, ef_construction >= 1 and ef_search >= 1")
        if not 0 < rebuild_fraction <= 1:
            raise ValueError("rebuild_fraction must be in (0, 1]")
        self.dim = int(dim)
        self.kind = self.name = kind
        self.exact = False
        self.m, self.ef_construction, self.ef_search = int(m), int(ef_construction), int(ef_search)
        self.min_train = int(min_train)
        self.sq_range_expand = float(sq_range_expand)
        self.rebuild_fraction = float(rebuild_fraction)
        self.epoch = 0
        self.compactions = 0
        self._template = None  # trained, empty copy: compaction clones it to keep the quantiser
        self._index = self._new_index()
        self._pos_ids = np.empty(0, np.int64)  # FAISS position -> caller id (capacity-doubling)
        self._alive = np.empty(0, bool)
        self._n = 0  # positions used in FAISS
        self._dead = 0
        self._bitmap: np.ndarray | None = None  # packed alive bits for IDSelectorBitmap; None when stale
        self._ids_sorted = True  # positions hold increasing ids (the ledger case): searchsorted removal
        self._staged = None if self._index.is_trained else ExactIndex(self.dim)
        self._selector = None

    # -- construction -----------------------------------------------------------------
    @property
    def compressed(self) -> bool:
        return self.kind.endswith("_sq8")

    def _new_index(self) -> Any:
        faiss = _faiss()
        ip = faiss.METRIC_INNER_PRODUCT
        if self._template is not None:
            return faiss.clone_index(self._template)
        if self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, self.m, ip)
        elif self.kind == "hnsw_sq8":
            index = faiss.IndexHNSWSQ(self.dim, faiss.ScalarQuantizer.QT_8bit, self.m, ip)
            faiss.downcast_index(index.storage).sq.rangestat_arg = self.sq_range_expand
        else:
            index = sq8_codes(self.dim, self.sq_range_expand)
        if self.kind.startswith("hnsw"):
            index.hnsw.efConstruction = self.ef_construction
            index.hnsw.efSearch = self.ef_search
        return index

    def train(self, sample: np.ndarray) -> None:
        """Train the quantiser (sq8 kinds) on ``sample`` now, instead of on the first ``min_train`` adds."""
        if self._index.is_trained:
            return
        sample = np.ascontiguousarray(sample, np.float32).reshape(-1, self.dim)
        if len(sample) == 0:
            raise ValueError("train needs at least one vector")
        self._index.train(sample)
        self._template = _faiss().clone_index(self._index)  # empty and trained
        staged, self._staged = self._staged, None
        if staged is not None and len(staged):
            self._add_trained(staged.vectors, staged.ids)

    # -- the index interface ----------------------------------------------------------
    def __len__(self) -> int:
        return self._n - self._dead + (len(self._staged) if self._staged is not None else 0)

    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        vecs, ids = rows_and_ids(vecs, ids, self.dim)
        if len(ids) == 0:
            return
        if self._staged is not None:
            self._staged.add(vecs, ids)
            if len(self._staged) >= self.min_train:
                self.train(self._staged.vectors)
            return
        self._add_trained(vecs, ids)

    def _add_trained(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        need = self._n + len(ids)
        if need > len(self._pos_ids):
            cap = max(need, 2 * len(self._pos_ids), 1024)
            grown_i = np.empty(cap, np.int64)
            grown_i[: self._n] = self._pos_ids[: self._n]
            grown_a = np.zeros(cap, bool)
            grown_a[: self._n] = self._alive[: self._n]
            self._pos_ids, self._alive = grown_i, grown_a
        if self._ids_sorted:
            prev = self._pos_ids[self._n - 1] if self._n else np.iinfo(np.int64).min
            self._ids_sorted = bool(ids[0] > prev and np.all(np.diff(ids) > 0))
        self._index.add(np.ascontiguousarray(vecs))
        self._pos_ids[self._n : need] = ids
        self._alive[self._n : need] = True
        self._n = need
        self._bitmap = None

    def remove(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, np.int64).reshape(-1)
        if self._staged is not None:
            self._staged.remove(ids)
        pos_ids = self._pos_ids[: self._n]
        if self._ids_sorted:
            where = np.searchsorted(pos_ids, ids)
            inside = where < self._n
            where = where[inside]
            hit = where[pos_ids[where] == ids[inside]]
        else:
            hit = np.flatnonzero(np.isin(pos_ids, ids))
        hit = np.unique(hit)
        hit = hit[self._alive[hit]]
        if len(hit):
            self._alive[hit] = False
            self._dead += len(hit)
            self._bitmap = None
        self.epoch += 1
        if self._dead and self._dead > self.rebuild_fraction * self._n:
            self.compact()

    def compact(self) -> None:
        """Rebuild the FAISS index from its live vectors, dropping tombstones."""
        old, old_ids, old_alive, n = self._index, self._pos_ids, self._alive, self._n
        self._index = self._new_index()
        self._pos_ids = np.empty(0, np.int64)
        self._alive = np.empty(0, bool)
        self._n = self._dead = 0
        self._ids_sorted = True
        self._bitmap = None
        for lo in range(0, n, _ADD_CHUNK):
            hi = min(n, lo + _ADD_CHUNK)
            live = np.flatnonzero(old_alive[lo:hi])
            if len(live):
                vecs = old.reconstruct_n(lo, hi - lo)[live]
                self._add_trained(vecs, old_ids[lo:hi][live])
        self.compactions += 1
        self.epoch += 1

    @property
    def ids(self) -> np.ndarray:
        """Live ids: FAISS-held ones in insertion order, then staged ones."""
        out = self._pos_ids[: self._n][self._alive[: self._n]]
        if self._staged is not None and len(self._staged):
            out = np.concatenate([out, self._staged.ids])
        return out

    @property
    def vectors(self) -> np.ndarray:
        """Live vectors in ``ids`` order, decoded from FAISS (a copy; lossy for sq8)."""
        parts = []
        for lo in range(0, self._n, _ADD_CHUNK):
            hi = min(self._n, lo + _ADD_CHUNK)
            live = np.flatnonzero(self._alive[lo:hi])
            if len(live):
                parts.append(self._index.reconstruct_n(lo, hi - lo)[live])
        if self._staged is not None and len(self._staged):
            parts.append(np.array(self._staged.vectors))
        return np.concatenate(parts) if parts else np.empty((0, self.dim), np.float32)

    @property
    def n_tombstones(self) -> int:
        return self._dead

    @property
    def nbytes(self) -> int:
        """Bytes held: FAISS codes + graph (sizes, not std::vector capacities) + id map + staging."""
        faiss = _faiss()
        index = self._index
        total = 0
        if self.kind.startswith("hnsw"):
            h = index.hnsw
            total += h.neighbors.size() * 4 + h.levels.size() * 4 + h.offsets.size() * 8
            storage = faiss.downcast_index(index.storage)
        else:
            storage = index
        total += storage.codes.size()
        total += self._pos_ids.nbytes + self._alive.nbytes
        if self._staged is not None:
            total += self._staged.nbytes
        return int(total)

    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        if start:
            raise ValueError(f"{self.kind} index cannot search from a row offset (start={start}); search all")
        queries = np.ascontiguousarray(queries, np.float32).reshape(-1, self.dim)
        n_q = len(queries)
        kk = min(k, len(self))
        if kk == 0 or n_q == 0:
            return np.empty((n_q, kk), np.float32), np.empty((n_q, kk), np.int64)
        parts_s, parts_i = [], []
        live_in_faiss = self._n - self._dead
        staged = self._staged if self._staged is not None and len(self._staged) > 0 else None
        if live_in_faiss:
            kf = min(kk, live_in_faiss)
            sims, pos = self._index.search(queries, kf, params=self._search_params())
            if staged is None and kf == kk and pos.min() >= 0:
                # Fast path (generic merging would cost nearly as much as FAISS's search of one
                # query, docs/reference/measurements.md): FAISS returns rows sorted by similarity
                # desc; only runs of equal similarities need the id-desc tie order, and those are rare.
                ids = self._pos_ids[pos]
                if kk == 1 or not (np.any(sims[:, 1:] == sims[:, :-1]) or np.any(sims[:, 1:] > sims[:, :-1])):
                    return sims, ids
                return top_k(sims, ids, kk)
            ok = pos >= 0
            parts_i.append(np.where(ok, self._pos_ids[np.where(ok, pos, 0)], -1))
            parts_s.append(np.where(ok, sims, -np.inf).astype(np.float32))
        if staged is not None:
            s, i = staged.search(queries, kk)
            parts_s.append(s)
            parts_i.append(i)
        sims, ids = top_k(np.concatenate(parts_s, axis=1), np.concatenate(parts_i, axis=1), kk)
        return sims, ids

    def _search_params(self) -> Any:
        faiss = _faiss()
        sel = None
        if self._dead:
            if self._bitmap is None:
                self._bitmap = np.packbits(self._alive[: self._n], bitorder="little")
            sel = faiss.IDSelectorBitmap(self._n, faiss.swig_ptr(self._bitmap))
        if self.kind.startswith("hnsw"):
            params = faiss.SearchParametersHNSW(efSearch=self.ef_search)
            if sel is not None:
                params.sel = sel
        elif sel is not None:
            params = faiss.SearchParameters(sel=sel)
        else:
            return None
        self._selector = sel  # FAISS holds raw pointers: keep the selector and its bitmap alive
        return params
