"""Exact top-k from a smaller copy of the vectors: a coded shortlist, then float32 scores.

A few queries' exact search reads every stored float32 vector, one matrix-vector product
per query; beyond a few thousand rows that memory traffic, not arithmetic, is its cost,
and it grows with every correction. The shortlist keeps a coded copy of the vectors in a
FAISS scalar-quantizer index (the scan releases the GIL), finds each query's best
candidates there, and scores only those with the exact float32 product. The copy is
float16 (``code="fp16"``, half the bytes) or 8-bit (``code="sq8"``, a quarter: one
range for every component, fitted to the rows; a row with a value outside it is scored
exactly by every search, and once more than ``MAX_OUTSIDE`` are, the range is widened
and every row coded again). The answer is the exact search's, not an approximation of it:

* every stored row's coding error ``r = ||v - decode(code(v))||`` is known, so a coded
  score is within ``E = ||q|| (r_max + g (2 |v|_max + r_max) + sqrt(d) e)`` of the exact
  one (``g``: the float32 rounding bound of a 384-term sum, for both sums; ``e``: how far
  FAISS's vectorised decoding of one component can be from its own ``sa_decode``, 0 for
  float16, which decodes exactly);
* the k-th best coded score minus E is a floor the exact k-th best score cannot be
  under, so any row that can be in the exact top-k has a coded score within 2E of the
  k-th best: those rows are the candidates;
* their exact scores are the same bits as a one-thread full scan's: a BLAS
  matrix-vector product works through the rows in small aligned groups (a row alone at
  the end takes another kernel, which can round differently), so each candidate is
  scored inside its aligned group of rows, cut at the end of the matrix as the full
  scan is (the group: the smallest of 4, 8, 16 rows that reproduces a one-thread full
  scan with this BLAS and dimension, ``aligned_group``; none does: every search is a full
  scan); the best k of those rows (by similarity, then id, descending:
  ``top_k``'s order) are then the full scan's answer, ties included;
* a row coded outside the 8-bit range (clipped: its error is not bounded by ``r_max``) is
  a candidate of every query, and never sets the k-th best coded score;
* a query whose candidates might reach past the shortlist's depth (many exact
  duplicates), or whose scores are not finite, is scanned in full instead.

Used by ``ExactIndex`` for searches of a few queries over many rows, and by the service's
pooled predicts. Thread-safe: searches run concurrently (FAISS releases the GIL), each on
the rows its own matrix holds; copying in new rows waits for the searches in flight.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ocrr.utils import grow_ahead
from ocrr.utils.rwlock import RWLock

if TYPE_CHECKING:
    import faiss

UNIT_ROUNDOFF = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32
# Group sizes tried, smallest first (a BLAS matrix-vector kernel takes 4 or 8 rows at once):
# the smallest that reproduces the full scan here is used (``aligned_group``).
_GROUPS = (4, 8, 16)
# A float32 norm of a 384-term difference is within ~1e-5 (relative) of the true one; the
# margin covers that many times over, so the rounding bound stays a bound.
NORM_MARGIN = 1 + 1e-3
_ADD_ROWS = 1 << 16  # rows copied in per slice
CODES = ("fp16", "sq8")  # "i8": index/int8_shortlist.py (``exact.new_shortlist`` makes either)
# An 8-bit range is widened by this share of its width on each side, so that rows a little
# beyond the ones it was fitted to stay inside it.
WIDEN = 0.125
# Rows outside the 8-bit range that searches score exactly before every row is coded again
# with a wider range (a stall for the searches meanwhile). MiniLM embeddings rarely step
# outside: none of the 11k-19k later rows of banking77 or clinc150 left a range fitted to
# their first 2,000 (2 of clinc150's left one fitted to its first 500).
MAX_OUTSIDE = 64
_AHEAD_ROWS = 1 << 12  # rows copied into the next copy per hold of the read lock (short: searches wait)

FullScan = Callable[[np.ndarray, np.ndarray, int], tuple[np.ndarray, np.ndarray]]


class Shortlist:
    """``search(matrix, queries, k, full_scan)`` = ``full_scan(matrix, queries, k)``, usually cheaper.

    ``matrix`` is the append-only (n, d) float32 array of stored vectors; rows added since
    the last call are copied in first. ``depth``: candidates taken from the coded scan per
    query (at least twice k). ``code``: "fp16" (2 bytes per number) or "sq8" (1 byte; more
    candidates to re-score, a quarter of the float32 bytes to scan)."""

    def __init__(self, dim: int, depth: int = 64, code: str = "fp16"):
        if code not in CODES:
            raise ValueError(f"code must be one of {CODES}, got {code!r}")
        self.dim, self.depth, self.code = dim, depth, code
        self.group = aligned_group(dim)  # rows scored together (None: no group reproduces the scan)
        self.code_size = 2 * dim if code == "fp16" else dim  # bytes per row
        self._range: tuple[float, float] | None = None  # sq8: (lowest value, width) coded
        self._decode_err = 0.0  # e above (sq8)
        self._outside = np.empty(0, np.int64)  # sq8: positions of rows past the range, ascending
        self.index = self._new_index()
        self.err_max = 0.0  # the largest ||v - decode(code(v))|| of any row
        self.norm_max = 0.0  # the largest ||v||
        # |fl(sum of dim products) - sum| <= gamma * sum of |products|
        self.gamma = dim * UNIT_ROUNDOFF / (1 - dim * UNIT_ROUNDOFF)
        self.queries = self.fallbacks = 0  # for /metrics: queries searched, and those scanned in full
        self._rows = RWLock()  # read: a search of the index; write: rows copied in
        self._count = threading.Lock()  # the counters above
        # grow_ahead(): the next, bigger index is made in the background (see _make_ahead):
        # (that index, the rows it has room for, the epoch it mirrors)
        self._grow_ahead = False
        self._ahead: tuple[faiss.IndexScalarQuantizer, int, int] | None = None
        self._ahead_busy = False
        self._room = 0  # rows the current index holds without reallocating (0: not known)
        self._epoch = 0  # bumped when rows are removed or re-coded: a copy made ahead before is stale
        self._ahead_thread: threading.Thread | None = None

    def grow_ahead(self) -> None:
        """From now on, make each bigger copy in a background thread before this one fills, so
        copying in new rows never waits for fresh memory (``ocrr.utils.grow_ahead``: FAISS
        keeps the codes in one growing array). For a long-lived index that answers requests."""
        self._grow_ahead = True

    def join_ahead(self) -> None:
        """Wait for the next copy being made in the background, if any (tests)."""
        if self._ahead_thread is not None:
            self._ahead_thread.join()

    def __len__(self) -> int:
        return self.index.ntotal

    @property
    def nbytes(self) -> int:
        """The codes held: 2 bytes per stored value (fp16), or 1 (sq8)."""
        return self.code_size * len(self)

    def catch_up(self, matrix: np.ndarray) -> None:
        """Copy in the rows of ``matrix`` added since the last call."""
        if len(matrix) <= len(self):
            return
        with self._rows.write():
            # (another search may have copied them meanwhile); in slices, so the temporaries
            # of a large first copy stay small
            if self.code == "sq8":
                self._cover(matrix)
            if self._ahead is not None and len(matrix) > self._room:
                self._adopt_ahead()
            for lo in range(len(self), len(matrix), _ADD_ROWS):
                self._add(np.ascontiguousarray(matrix[lo : lo + _ADD_ROWS], np.float32))
            n = len(self)
            if self._ahead is not None and self._ahead[0].ntotal < n:  # keep the next copy complete
                self._ahead[0].add_sa_codes(self._codes(self._ahead[0].ntotal, n))
            if (
                self._grow_ahead
                and not self._ahead_busy
                and self._ahead is None
                and grow_ahead.due(n, self._room, self.code_size * n)
            ):
                self._ahead_busy = True
                self._ahead_thread = threading.Thread(
                    target=self._make_ahead, args=(2 * n,), name="ocrr-grow-ahead", daemon=True
                )
                self._ahead_thread.start()

    def _make_ahead(self, rows: int) -> None:
        """A new index whose code array has room for ``rows`` rows, its memory backed now,
        holding the codes of the rows copied in so far."""
        try:
            epoch = self._epoch  # first: a re-coding after this is seen below
            ahead = self._new_index()
            ahead.codes.resize(rows * self.code_size)  # allocates and zero-fills: the slow part, without the GIL
            ahead.codes.resize(0)  # a vector keeps its capacity
            done = 0
            while True:  # in slices, each under the read lock: searches go on, new rows wait for one slice
                with self._rows.read():
                    if epoch != self._epoch:
                        return  # rows were removed meanwhile: what was copied no longer lines up
                    n = len(self)
                    hi = min(n, done + _AHEAD_ROWS)
                    if done < hi:
                        ahead.add_sa_codes(self._codes(done, hi))
                        done = hi
                    if done == n:  # no new rows can come while the lock is held: it is complete
                        self._ahead = (ahead, rows, epoch)
                        return
        finally:
            self._ahead_busy = False

    def _new_index(self) -> faiss.IndexScalarQuantizer:
        import faiss

        if self.code == "fp16":
            return faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        index = faiss.IndexScalarQuantizer(self.dim, faiss.ScalarQuantizer.QT_8bit_uniform, faiss.METRIC_INNER_PRODUCT)
        if self._range is not None:  # FAISS's uniform 8-bit code: x = lo + width * (c + 0.5) / 255
            faiss.copy_array_to_vector(np.array(self._range, np.float32), index.sq.trained)
            index.is_trained = True
        return index

    def _cover(self, matrix: np.ndarray) -> None:
        """sq8, under catch_up's write lock: make the range hold every value of ``matrix``;
        when it must widen, start an empty index with it (catch_up then codes every row
        again, and their bounds start afresh)."""
        new = matrix[len(self) :]
        if not len(new):  # another search copied them in meanwhile
            return
        with np.errstate(invalid="ignore"):
            lo, hi = float(np.min(new)), float(np.max(new))
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return  # a row that is not finite: the bound is infinite and every search falls back
        if self._range is not None:
            start, width = self._range
            if start <= lo and hi <= start + width:
                return
            beyond = int(np.count_nonzero(self._past_range(new)))
            if len(self._outside) + beyond <= MAX_OUTSIDE:
                return  # _add records them, and searches score them exactly
            old = matrix[: len(self)]
            lo, hi = min(lo, float(np.min(old, initial=lo))), max(hi, float(np.max(old, initial=hi)))
        pad = WIDEN * max(hi - lo, 1e-6)
        self._range = (lo - pad, (hi - lo) + 2 * pad)
        # FAISS's vectorised decoding computes lo + width * (c + 0.5) / 255 in float32, its own
        # sa_decode the same in another order: a few roundings of the largest value apart.
        self._decode_err = 8 * float(np.finfo(np.float32).eps) * max(abs(lo - pad), abs(hi + pad))
        self.index = self._new_index()  # empty: catch_up copies every row in again
        self.err_max = self.norm_max = 0.0
        self._outside = np.empty(0, np.int64)
        self._epoch += 1  # a next copy made before uses the old range
        self._ahead = None
        self._room = 0

    def _past_range(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` hold a value outside the 8-bit range (their codes are clipped)."""
        assert self._range is not None
        start, width = self._range
        return np.asarray(((rows < start) | (rows > start + width)).any(axis=1))

    def _adopt_ahead(self) -> None:
        """Under the write lock: switch to the index made ahead (which ``catch_up`` keeps
        complete), if no rows were removed or re-coded since it was made."""
        assert self._ahead is not None
        (ahead, room, epoch), self._ahead = self._ahead, None
        if epoch == self._epoch:  # else rows were removed or re-coded since: it no longer mirrors this one
            self.index, self._room = ahead, room

    def _codes(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of the codes, as a view (read them under a lock)."""
        import faiss

        width = self.code_size
        flat = faiss.rev_swig_ptr(self.index.codes.data(), len(self) * width)
        return flat.reshape(-1, width)[lo:hi]

    def remove_rows(self, rows: np.ndarray) -> None:
        """Drop the rows at these positions; the rest keep their order, as the matrix's rows do
        when an index removes entries (FAISS compacts its codes in place: no re-encoding). The
        error bounds stay bounds: they never shrink."""
        import faiss

        with self._rows.write():
            rows = np.ascontiguousarray(rows, np.int64)
            rows = rows[rows < len(self)]  # rows not copied in yet are not here
            if len(rows):  # (as ivf.py removes: a batch selector over the positions)
                self.index.remove_ids(faiss.IDSelectorBatch(len(rows), faiss.swig_ptr(rows)))
                if len(self._outside):  # the rows past the 8-bit range move down as the others do
                    self._outside = positions_after_removal(self._outside, np.unique(rows))
                self._epoch += 1
                self._ahead = None

    def _add(self, rows: np.ndarray) -> None:
        # fp16: numpy rounds to nearest even and FAISS decodes a float16 code exactly, so the
        # error of each row is measured on the very values the scan will read. sq8: FAISS codes
        # and decodes (the scan's decoding differs by at most _decode_err per component).
        with np.errstate(over="ignore", invalid="ignore"):  # a value beyond float16's range: infinite error
            codes: np.ndarray
            if self.code == "fp16":
                half = rows.astype(np.float16)
                err = np.linalg.norm(rows - half.astype(np.float32), axis=1) * NORM_MARGIN
                codes = half.view(np.uint8).reshape(len(rows), -1)
            elif self._range is None:  # values that are not finite: no range can hold them
                codes, err = np.zeros((len(rows), self.code_size), np.uint8), np.full(len(rows), np.inf)
            else:
                codes = self.index.sa_encode(rows)
                decoded = self.index.sa_decode(codes).astype(np.float64)
                err = np.linalg.norm(rows - decoded, axis=1) * NORM_MARGIN
                beyond = self._past_range(rows)
                if beyond.any():  # clipped: no bound of their own; every search scores them exactly
                    self._outside = np.concatenate([self._outside, len(self) + np.flatnonzero(beyond)])
                    err = np.where(beyond, 0.0, err)
            norms = np.linalg.norm(rows, axis=1) * NORM_MARGIN
        self.err_max = max(self.err_max, float(np.max(np.where(np.isfinite(err), err, np.inf))))
        self.norm_max = max(self.norm_max, float(np.max(np.where(np.isfinite(norms), norms, np.inf))))
        self.index.add_sa_codes(codes)

    def _counted(self, queries: int, fallbacks: int) -> None:
        with self._count:
            self.queries += queries
            self.fallbacks += fallbacks

    def search(
        self, matrix: np.ndarray, queries: np.ndarray, k: int, full_scan: FullScan, ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of each query over the rows of ``matrix``: (sims, ids), best first.

        ``ids``: the id of each row (ties go to the higher id), None for row numbers.
        ``full_scan(matrix, queries, k)`` answers the queries the shortlist cannot settle,
        with the same ids."""
        self.catch_up(matrix)
        n, kk = len(matrix), min(k, len(matrix))
        depth = min(max(self.depth, 2 * kk), n)
        with self._rows.read():
            # The index may hold rows past this matrix (a concurrent search copied in newer
            # ones): ask for as many more as it holds beyond n, then drop them.
            extra = len(self) - n
            # bounds for every row below n (they never shrink while the codes stay; re-coding
            # the rows, under the write lock, starts them afresh)
            err_max, norm_max, decode_err = self.err_max, self.norm_max, self._decode_err
            outside = self._outside
            if kk == 0 or depth <= kk or not np.isfinite(err_max + norm_max) or extra < 0 or not self.group:
                self._counted(len(queries), len(queries))
                return full_scan(matrix, queries, k)
            approx, rows = self.index.search(queries, depth + extra)
        if extra:
            approx, rows = _below(approx, rows, n, depth)
        slack = err_max + self.gamma * (2 * norm_max + err_max) + np.sqrt(self.dim) * decode_err
        bound = np.linalg.norm(queries.astype(np.float64), axis=1) * slack * (1 + 1e-6) + 1e-30
        approx = approx.astype(np.float64)
        outside = outside[outside < n].tolist()  # no bound: always candidates, never the k-th best
        if outside:
            inside = np.where(np.isin(rows, outside), -np.inf, approx)
            floor = np.sort(inside, axis=1)[:, -kk] - 2 * bound  # -inf: fewer than kk listed inside
        else:
            inside = approx
            floor = approx[:, kk - 1] - 2 * bound  # a candidate's coded score is at least this
        # Rows past the shortlist scored at most its last entry: safe only if that is below the floor.
        ok = np.isfinite(approx).all(axis=1) & np.isfinite(floor) & ((approx[:, -1] < floor) | (depth == n))

        def near_of(j: int) -> list[int]:  # within 2E of the k-th best coded score, and the rows past the range
            return rows[j][inside[j] >= floor[j]].tolist() + outside

        sims, out, redo = settle(matrix, queries, k, kk, ok, near_of, self.group, ids, full_scan)
        self._counted(len(queries), redo)
        return sims, out


def positions_after_removal(positions: np.ndarray, gone: np.ndarray) -> np.ndarray:
    """Ascending row positions, once the rows at ``gone`` (ascending, unique) are removed:
    those removed dropped, the others moved down past the removed rows below them."""
    left = positions[~np.isin(positions, gone)]
    return left - np.searchsorted(gone, left)


def settle(
    matrix: np.ndarray,
    queries: np.ndarray,
    k: int,
    kk: int,
    ok: np.ndarray,
    near_of: Callable[[int], list[int] | None],
    group: int,
    ids: np.ndarray | None,
    full_scan: FullScan,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The answers of a coded search: each query ``j`` marked ``ok`` from its candidates
    ``near_of(j)`` (``best_of``; None: too many), the others by ``full_scan``; and how many
    were scanned in full."""
    sims = np.empty((len(queries), kk), np.float32)
    out = np.empty((len(queries), kk), np.int64)
    for j in np.flatnonzero(ok).tolist():
        near = near_of(j)
        if near is None:
            ok[j] = False
        else:
            sims[j], out[j] = best_of(matrix, queries[j], near, group, kk, ids)
    redo = np.flatnonzero(~ok)
    if len(redo):
        sims[redo], out[redo] = full_scan(matrix, queries[redo], k)
    return sims, out, len(redo)


def best_of(
    matrix: np.ndarray, query: np.ndarray, near: list[int], group: int, k: int, ids: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The full scan's best ``k`` (sims, ids) among the rows ``near`` (positions in
    ``matrix``, a few dozen at most): each scored inside its aligned group of ``group``
    rows, so its float32 score is the same bits as a one-thread matrix-vector product over
    every row gives it (``aligned_group``); ordered as ``top_k`` orders (similarity, then id,
    descending)."""
    n = len(matrix)
    groups = np.array(sorted({r // group for r in near}), np.int64) * group  # a set beats np.unique here
    cand = (groups[:, None] + np.arange(group)).ravel()
    cand = cand[cand < n]  # only the last group can be cut, and it stays last
    exact = matrix[cand] @ query
    cand_ids = cand if ids is None else ids[cand]
    best = np.lexsort((-cand_ids, -exact))[:k]
    return exact[best], cand_ids[best]


@functools.cache
def aligned_group(dim: int) -> int | None:
    """The smallest number of rows (of ``_GROUPS``) whose aligned groups, gathered as
    ``search`` gathers its candidates' and multiplied by a vector, give the same bits as one
    matrix-vector product over all the rows on one thread, the last group cut short where the
    matrix ends: tried with this BLAS on random rows of ``dim`` (a kernel that takes more rows
    at once sums some of them in another order, which shows at once). None: no size does, and
    the shortlist cannot be exact."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    rows = rng.standard_normal((16 * 24 + 11, dim)).astype(np.float32)  # the last group is cut short
    queries = rng.standard_normal((4, dim)).astype(np.float32)
    with threadpool_limits(1):
        full = [rows @ q for q in queries]
        for group in _GROUPS:
            last = (len(rows) - 1) // group  # cut short
            # groups gathered as a search might: one alone, a few, every second or third, the last
            picks = [[0], [3], [last], [1, 2, 5], [0, last], list(range(0, last, 2)), list(range(1, last + 1, 3))]
            if all(_same_bits(rows, queries, full, group, np.array(p)) for p in picks):
                return group
    return None


def _same_bits(rows: np.ndarray, queries: np.ndarray, full: list[np.ndarray], group: int, picks: np.ndarray) -> bool:
    cand = (picks[:, None] * group + np.arange(group)).ravel()
    cand = cand[cand < len(rows)]
    return all(np.array_equal(rows[cand] @ q, f[cand]) for q, f in zip(queries, full, strict=True))


def _below(approx: np.ndarray, rows: np.ndarray, n: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best ``depth`` results among rows below ``n`` (FAISS lists them best
    first, so keeping the order keeps "rows past the list scored at most its last")."""
    keep = rows < n
    order = np.argsort(~keep, axis=1, kind="stable")[:, :depth]  # kept ones first, in FAISS's order
    return np.take_along_axis(approx, order, axis=1), np.take_along_axis(rows, order, axis=1)
