"""Exact inner-product search with numpy: chunked matrix products, deterministic ties.

Neighbours are ordered by similarity, descending; equal similarities are ordered by
id, descending (the more recent entry first), so that the result is a total order and
does not depend on how the work was chunked (``ocrr.index.topk``).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import numpy as np

from ocrr.index.anticipated import Anticipated
from ocrr.index.int8_shortlist import Int8Shortlist
from ocrr.index.shortlist import CODES, Shortlist
from ocrr.index.topk import top_k

#: Either kind of coded copy: they answer the same calls (``search``, ``catch_up``, ...).
AnyShortlist = Shortlist | Int8Shortlist

# Bound the temporary (queries x entries) similarity block to about 64 MB of float32.
_BLOCK_ELEMENTS = 16_000_000
# Below this many queries, one matrix-vector product per query beats one matrix product.
GEMV_BELOW = 8
# From this many stored numbers (16 MB of float32: 10.9k rows of 384), such queries are
# searched through a float16 shortlist (the same answer from half the bytes,
# index/shortlist.py). Below it the rows stay in a 32 MB cache and the float32 scan is
# sooner; above it, and whenever another process shares the cache, the shortlist is.
SHORTLIST_FROM_FLOATS = 1 << 22


def exact_search(
    matrix: np.ndarray, queries: np.ndarray, k: int, rows: np.ndarray | None = None, chunk_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k over rows of ``matrix`` without copying it (ground truth for recall).

    ``rows``: the row numbers (= ids) to search, e.g. a bounded substrate's live ids;
    None searches every row, with id = row number. Rows are scanned in chunks (a gathered
    chunk is the only copy), and chunk results merged with ``top_k``, so the answer is
    ``ExactIndex.search``'s over the same rows (BLAS may round a similarity differently,
    by an ulp, for a different block shape; only such exact near-ties can reorder).
    """
    queries = np.ascontiguousarray(queries, np.float32)
    n_q = queries.shape[0]
    total = matrix.shape[0] if rows is None else len(rows)
    if chunk_rows is None:
        chunk_rows = max(4096, _BLOCK_ELEMENTS // max(1, n_q))
    best_s = np.empty((n_q, 0), np.float32)
    best_i = np.empty((n_q, 0), np.int64)
    for lo in range(0, total, chunk_rows):
        hi = min(total, lo + chunk_rows)
        if rows is None:
            block, ids = matrix[lo:hi], np.arange(lo, hi, dtype=np.int64)
        else:
            ids = np.asarray(rows[lo:hi], np.int64)
            block = matrix[ids]
        s, i = top_k(queries @ block.T, ids, k)
        best_s, best_i = top_k(np.concatenate([best_s, s], axis=1), np.concatenate([best_i, i], axis=1), k)
    return best_s, best_i


def _close_gaps(buf: np.ndarray, n: int, gone: np.ndarray) -> int:
    """Drop the rows at positions ``gone`` (ascending, below ``n``) of the C-contiguous ``buf`` in
    place, the others keeping their order; return how many rows remain. Each run of kept rows
    moves once, with memmove: numpy's assignment between overlapping slices goes through a
    temporary copy, several times slower for a bounded index evicting one row
    (docs/reference/measurements.md). Rows from the new length on are left as they were, as
    before."""
    if not buf.flags.c_contiguous:
        raise ValueError("_close_gaps needs a C-contiguous buffer")
    row, base, dst = buf.strides[0], buf.ctypes.data, int(gone[0])
    for lo, hi in zip(gone.tolist(), [*gone[1:].tolist(), n]):
        if hi - lo > 1:  # the kept rows lo + 1 .. hi - 1
            ctypes.memmove(base + dst * row, base + (lo + 1) * row, (hi - lo - 1) * row)
            dst += hi - lo - 1
    return dst


class ExactIndex:
    """Brute-force search over a growing float32 matrix of unit vectors.

    Two storage modes, same results:

    * owned (default): the index keeps its own capacity-doubling copy of the vectors.
    * borrowed (``source=`` a callable returning a 2-D array, e.g. ``lambda: ledger.vectors``):
      the index holds no copy; row ``i`` of ``source()`` is the vector of id ``i`` and
      the index covers rows ``0 .. len-1``. This is the unbounded substrate's case,
      where the ledger's append-only buffer already holds every vector once.
      Anything that breaks "ids are 0..n-1 in order" (a removal, an out-of-order add,
      vectors that differ from the source's rows) first copies the live rows into an
      owned buffer (``borrowed`` becomes False), so behaviour never depends on the mode.

    A search of fewer than ``GEMV_BELOW`` queries over ``SHORTLIST_FROM_FLOATS`` stored
    numbers or more reads a float16 copy of the rows first (``shortlist()``, made on first
    use, kept in step with appends and removals, 2 bytes per number; ``shortlist=False``
    never makes one): the answer is the float32 scan's, bit for bit (index/shortlist.py),
    as a scan on one BLAS thread computes it. With BLAS on more threads, a plain scan can
    round a few rows (where the threads' shares meet) differently; ``ocrr run``, ``ocrr
    sweep`` and the service pin BLAS to one thread.
    """

    name = "exact"
    exact = True  # results equal brute-force float32 search: recall 1.0
    supports_start = True  # search(..., start=r) scans only rows r: (used by IncrementalSearch)

    def __init__(self, dim: int, source: Callable[[], np.ndarray] | None = None, shortlist: bool = True):
        self.dim = dim
        self._source = source
        self._vecs = np.empty((0, dim), np.float32)
        self._ids = np.empty(0, np.int64)
        self._n = 0
        self.epoch = 0  # bumped whenever rows are removed: cached partial results become stale
        self.use_shortlist = shortlist  # False: every search scans the float32 rows
        self._shortlist: AnyShortlist | None = None  # made by the first few-query search over many rows
        self._making = threading.Lock()
        self._anticipated: Anticipated | None = None  # candidates of queries known in advance

    def __len__(self) -> int:
        return self._n

    @property
    def borrowed(self) -> bool:
        return self._source is not None

    def _lent(self) -> np.ndarray:
        """The lender's array (called only while borrowing)."""
        assert self._source is not None, "called only while borrowing"
        return self._source()

    @property
    def nbytes(self) -> int:
        """Bytes this index holds itself (0 when borrowing; capacity, not just length, when owned)."""
        return 0 if self.borrowed else int(self._vecs.nbytes + self._ids.nbytes)

    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        """Append rows (capacity doubles, so appends are amortised O(1))."""
        vecs = np.asarray(vecs, np.float32).reshape(-1, self.dim)
        ids = np.asarray(ids, np.int64).reshape(-1)
        if len(vecs) != len(ids):
            raise ValueError(f"add got {len(vecs)} vectors but {len(ids)} ids")
        if self.borrowed:
            if self._borrow_fits(vecs, ids):
                self._n += len(ids)
                return
            self._own()
        need = self._n + len(ids)
        if need > len(self._ids):
            cap = max(need, 2 * len(self._ids), 1024)
            grown_v = np.empty((cap, self.dim), np.float32)
            grown_v[: self._n] = self._vecs[: self._n]
            grown_i = np.empty(cap, np.int64)
            grown_i[: self._n] = self._ids[: self._n]
            self._vecs, self._ids = grown_v, grown_i
        self._vecs[self._n : need] = vecs
        self._ids[self._n : need] = ids
        self._n = need

    def _borrow_fits(self, vecs: np.ndarray, ids: np.ndarray) -> bool:
        m, n = len(ids), self._n
        if m == 0:
            return True
        if ids[0] != n or ids[-1] != n + m - 1 or (m > 1 and not np.array_equal(ids, np.arange(n, n + m))):
            return False
        src = self._lent()
        return src.ndim == 2 and src.shape[0] >= n + m and np.array_equal(src[n : n + m], vecs)

    def add_from_source(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        """``add`` for the owner of the source, who has just appended exactly these rows to
        it (the unbounded substrate after a ledger append): while borrowing, the rows are
        covered without copying or comparing them; an owned index adds them as usual."""
        n, m = self._n, len(ids)
        if self.borrowed and m and ids[0] == n and ids[-1] == n + m - 1 and self._lent().shape[0] >= n + m:
            self._n += m
        else:
            self.add(vecs, ids)

    def _own(self) -> None:
        """Switch from borrowed to owned: copy the live rows once."""
        src = self._lent()
        cap = max(self._n, 1024)
        self._vecs = np.empty((cap, self.dim), np.float32)
        self._vecs[: self._n] = src[: self._n]
        self._ids = np.empty(cap, np.int64)
        self._ids[: self._n] = np.arange(self._n)
        self._source = None

    def remove(self, ids: np.ndarray) -> None:
        """Drop entries by id (used by bounded variants); order of the rest is kept."""
        if self.borrowed:
            self._own()
        gone = np.flatnonzero(np.isin(self._ids[: self._n], np.asarray(ids, np.int64)))
        if len(gone):
            _close_gaps(self._vecs, self._n, gone)
            self._n = _close_gaps(self._ids, self._n, gone)
        self.epoch += 1
        self._anticipated = None  # its candidates were chosen among rows that moved
        if self._shortlist is not None:  # the coded copy follows (a bounded index evicts at every step)
            self._shortlist.remove_rows(gone)

    @property
    def ids(self) -> np.ndarray:
        if self.borrowed:
            return np.arange(self._n, dtype=np.int64)
        return self._ids[: self._n]

    def __getstate__(self) -> dict:
        # the shortlist is a cache of the rows (and holds locks): a copy makes its own when asked
        state = self.__dict__.copy()
        state["_shortlist"] = state["_making"] = state["_anticipated"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._making = threading.Lock()

    def shortlist(self, code: str | None = None) -> AnyShortlist:
        """The coded copy of the rows that searches of a few queries go through (made on
        first use, float16 unless ``code`` says otherwise: index/shortlist.py,
        index/int8_shortlist.py; the service's pooled predicts share it). Asking for another
        ``code`` replaces it."""
        with self._making:
            if self._shortlist is None or (code is not None and code != self._shortlist.code):
                self._shortlist = new_shortlist(self.dim, code or "fp16")
            return self._shortlist

    def adopt_shortlist(self, shortlist: AnyShortlist) -> None:
        """Use ``shortlist`` (the coded copy of this index's rows, made elsewhere: another
        process coded them once for every worker) as the one ``shortlist()`` returns."""
        if len(shortlist) > self._n:
            raise ValueError(f"the shortlist holds {len(shortlist)} rows, the index {self._n}")
        with self._making:
            self._shortlist = shortlist

    def anticipate(self, queries: np.ndarray, k: int) -> None:
        """These queries will be searched for their top ``k``, as a stream asks them: score
        them against the rows held now in one matrix product, so that each later search of
        them scores only their candidates and the rows added since (index/anticipated.py).
        However many come at once, each answer is a one-query search's, bit for bit (without
        the hint, eight or more at once go through a matrix product, which can round a
        similarity differently). Replaces what was anticipated before."""
        queries = np.asarray(queries, np.float32).reshape(-1, self.dim)
        self._anticipated = Anticipated(self.vectors, queries, k)

    @property
    def vectors(self) -> np.ndarray:
        if self.borrowed:
            return self._lent()[: self._n]
        return self._vecs[: self._n]

    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of each query over rows ``start:`` of the index.

        Returns (sims, ids) of shape (n_queries, min(k, rows)). Queries are processed
        in blocks so memory stays bounded for any index size.
        """
        queries = np.asarray(queries, np.float32).reshape(-1, self.dim)
        ids: np.ndarray | int
        if self._source is not None:  # borrowed: ids are row numbers, given as the first one
            vecs = self._source()[start : self._n]
            ids = start
        else:
            vecs = self._vecs[start : self._n]
            ids = self._ids[start : self._n]
        n_q, n_rows = queries.shape[0], len(vecs)
        kk = min(k, n_rows)
        if kk == 0 or n_q == 0:
            return np.empty((n_q, kk), np.float32), np.empty((n_q, kk), np.int64)
        if start == 0 and self._anticipated is not None:
            # queries known in advance, however many at once: their candidates, scored as a
            # one-by-one scan scores them (a stream's answers do not depend on how it is batched)
            known = self._anticipated.search(vecs, ids, queries, kk)
            if known is not None:
                return known
        if n_q < GEMV_BELOW:
            # A matrix-matrix product first packs the whole entry matrix, a matrix-vector product
            # streams it once (docs/reference/measurements.md): few queries go one by one.
            if start == 0 and n_rows * self.dim >= SHORTLIST_FROM_FLOATS and self.use_shortlist:
                row_ids = None if isinstance(ids, int) else ids
                return self.shortlist().search(vecs, queries, kk, lambda m, q, k: _scan_few(m, ids, q, k), row_ids)
            return _scan_few(vecs, ids, queries, kk)
        out_s = np.empty((n_q, kk), np.float32)
        out_i = np.empty((n_q, kk), np.int64)
        rows_per_block = max(1, _BLOCK_ELEMENTS // max(1, n_rows))
        for lo in range(0, n_q, rows_per_block):
            hi = min(n_q, lo + rows_per_block)
            sims = queries[lo:hi] @ vecs.T
            out_s[lo:hi], out_i[lo:hi] = top_k(sims, ids, kk)
        return out_s, out_i


#: The codes of the shortlists ``ExactIndex.shortlist`` makes: float16 and FAISS's 8-bit
#: (index/shortlist.py), signed bytes scanned as integers (index/int8_shortlist.py).
SHORTLIST_CODES = (*CODES, "i8")


def new_shortlist(dim: int, code: str = "fp16") -> AnyShortlist:
    """A shortlist of one of ``SHORTLIST_CODES``."""
    if code not in SHORTLIST_CODES:
        raise ValueError(f"code must be one of {SHORTLIST_CODES}, got {code!r}")
    return Int8Shortlist(dim) if code == "i8" else Shortlist(dim, code=code)


def _scan_few(vecs: np.ndarray, ids: np.ndarray | int, queries: np.ndarray, kk: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of a few queries, one matrix-vector product each (what the shortlist reproduces)."""
    sims = (vecs @ queries[0])[None] if len(queries) == 1 else np.stack([vecs @ q for q in queries])
    return top_k(sims, ids, kk)


def rows_and_ids(vecs: np.ndarray, ids: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """What an index's ``add`` stores: float32 rows of ``dim`` and int64 ids, one id per row."""
    rows = np.ascontiguousarray(vecs, np.float32).reshape(-1, dim)
    ids = np.asarray(ids, np.int64).reshape(-1)
    if len(rows) != len(ids):
        raise ValueError(f"add got {len(rows)} vectors but {len(ids)} ids")
    return rows, ids
