"""Exact top-k from a half-size copy of the vectors: a float16 shortlist, then float32 scores.

A predict's exact search reads every stored float32 vector; on a small shared box that
memory traffic, not arithmetic, is its cost (a 16k x 384 ledger is 25 MB, beyond what the
cache keeps), and it grows with every correction. The shortlist keeps a float16 copy of
the vectors in a FAISS scalar-quantizer index (half the bytes; the scan releases the
GIL), finds each query's best candidates there, and scores only those with the exact
float32 product. The answer is the exact search's, not an approximation of it:

* every stored row's float16 rounding error ``r = ||v - fp16(v)||`` is known, so a
  float16 score is within ``E = ||q|| (r_max + g (2 |v|_max + r_max))`` of the exact
  one (``g``: the float32 rounding bound of a 384-term sum, for both sums);
* the k-th best float16 score minus E is a floor the exact k-th best score cannot be
  under, so any row that can be in the exact top-k has a float16 score within 2E of the
  k-th best: those rows are the candidates;
* their exact scores are the same bits as the full scan's: a BLAS matrix-vector product
  works through the rows in small aligned groups (a row alone at the end takes another
  kernel, which can round differently), so each candidate is scored inside its aligned
  group of ``_GROUP`` rows, cut at the end of the matrix as the full scan is; the best k
  of those rows (by similarity, then id, descending: ``top_k``'s order) are then the full
  scan's answer, ties included;
* a query whose candidates might reach past the shortlist's ``depth`` best (many exact
  duplicates), or whose scores are not finite, is scanned in full instead.

Thread-safe: searches run concurrently (FAISS releases the GIL), each on the rows its own
matrix holds; copying in new rows waits for the searches in flight.
"""

from __future__ import annotations

import threading

import numpy as np

from ocrr.utils.rwlock import RWLock

_U32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32
_GROUP = 16  # a multiple of the rows a BLAS matrix-vector kernel takes at once (4 or 8)


class Shortlist:
    """``search(matrix, queries, k, full_scan)`` = ``full_scan(matrix, queries, k)``, usually cheaper.

    ``matrix`` is the append-only (n, d) float32 array of stored vectors (row = id); rows
    added since the last call are copied in first. ``depth``: candidates taken from the
    float16 scan per query."""

    def __init__(self, dim: int, depth: int = 64):
        import faiss

        self.dim, self.depth = dim, depth
        self.index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        self.err_max = 0.0  # the largest ||v - fp16(v)|| of any row
        self.norm_max = 0.0  # the largest ||v||
        self.gamma = dim * _U32 / (1 - dim * _U32)  # |fl(sum of dim products) - sum| <= gamma * sum of |products|
        self.queries = self.fallbacks = 0  # for /metrics: queries searched, and those scanned in full
        self._rows = RWLock()  # read: a search of the index; write: rows copied in
        self._count = threading.Lock()  # the counters above

    def __len__(self) -> int:
        return self.index.ntotal

    def catch_up(self, matrix: np.ndarray) -> None:
        """Copy in the rows of ``matrix`` added since the last call."""
        if len(matrix) <= len(self):
            return
        with self._rows.write():
            if len(matrix) > len(self):  # another search may have copied them meanwhile
                self._add(np.ascontiguousarray(matrix[len(self) :], np.float32))

    def _add(self, rows: np.ndarray) -> None:
        codes = self.index.sa_encode(rows)
        decoded = self.index.sa_decode(codes).astype(np.float64)  # FAISS's own rounding, not a guess at it
        with np.errstate(over="ignore", invalid="ignore"):  # a row beyond float16's range: infinite error
            err = np.linalg.norm(rows - decoded, axis=1)
        self.err_max = max(self.err_max, float(np.max(np.where(np.isfinite(err), err, np.inf))))
        self.norm_max = max(self.norm_max, float(np.linalg.norm(rows.astype(np.float64), axis=1).max()))
        self.index.add_sa_codes(codes)

    def _counted(self, queries: int, fallbacks: int) -> None:
        with self._count:
            self.queries += queries
            self.fallbacks += fallbacks

    def search(self, matrix: np.ndarray, queries: np.ndarray, k: int, full_scan) -> tuple[np.ndarray, np.ndarray]:
        self.catch_up(matrix)
        n, kk = len(matrix), min(k, len(matrix))
        depth = min(self.depth, n)
        with self._rows.read():
            # The index may hold rows past this matrix (a concurrent search copied in newer
            # ones): ask for as many more as it holds beyond n, then drop them.
            extra = len(self) - n
            err_max, norm_max = self.err_max, self.norm_max  # never shrink: bounds for every row below n
            if kk == 0 or depth <= kk or not np.isfinite(err_max) or extra < 0:
                self._counted(len(queries), len(queries))
                return full_scan(matrix, queries, k)
            approx, rows = self.index.search(queries, depth + extra)
        if extra:
            approx, rows = _below(approx, rows, n, depth)
        self._counted(len(queries), 0)
        slack = err_max + self.gamma * (2 * norm_max + err_max)
        bound = np.linalg.norm(queries.astype(np.float64), axis=1) * slack * (1 + 1e-6) + 1e-30
        approx = approx.astype(np.float64)
        floor = approx[:, kk - 1] - 2 * bound  # a candidate's float16 score is at least this
        # Rows past the shortlist scored at most its last entry: safe only if that is below the floor.
        ok = np.isfinite(approx).all(axis=1) & np.isfinite(bound) & ((approx[:, -1] < floor) | (depth == n))
        sims = np.empty((len(queries), kk), np.float32)
        ids = np.empty((len(queries), kk), np.int64)
        for j in np.flatnonzero(ok).tolist():
            near = rows[j][approx[j] >= floor[j]].tolist()  # a few dozen at most: a set beats np.unique
            groups = np.array(sorted({r // _GROUP for r in near}), np.int64) * _GROUP
            cand = (groups[:, None] + np.arange(_GROUP)).ravel()
            cand = cand[cand < n]  # only the last group can be cut, and it stays last
            exact = matrix[cand] @ queries[j]
            best = np.lexsort((-cand, -exact))[:kk]  # top_k's order: similarity, then id, descending
            sims[j], ids[j] = exact[best], cand[best]
        redo = np.flatnonzero(~ok)
        if len(redo):
            self._counted(0, len(redo))
            sims[redo], ids[redo] = full_scan(matrix, queries[redo], k)
        return sims, ids


def _below(approx: np.ndarray, rows: np.ndarray, n: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best ``depth`` results among rows below ``n`` (FAISS lists them best
    first, so keeping the order keeps "rows past the list scored at most its last")."""
    keep = rows < n
    order = np.argsort(~keep, axis=1, kind="stable")[:, :depth]  # kept ones first, in FAISS's order
    return np.take_along_axis(approx, order, axis=1), np.take_along_axis(rows, order, axis=1)
