"""Exact top-k from an 8-bit copy of the vectors, scanned with integer dot products.

The same contract as ``index/shortlist.py`` (a coded scan finds candidates, their float32
scores decide, and the answer is the full scan's, bit for bit), with another scan. FAISS's
8-bit scan decodes every code to a float before it multiplies, in one dependency chain: it
takes about as long as the float32 scan over four times the bytes. Here the codes are
signed bytes around one centre, the query is rounded to signed bytes too, and SimSIMD sums
their products as integers (VNNI where the CPU has it), in about half the time
(docs/service.md, "How a request runs"). At 384 dimensions every partial sum is an integer
below 2^24 in magnitude (384 x 127 x 127), so the sum is exact in any of its kernels; it
is checked once per process and dimension (``dot_is_exact``), extremes included.

The two roundings are known, so the coded score is a proven distance from the exact one.
With a row ``v`` coded as ``c`` (``v ~ m + h c``: centre ``m``, step ``h``) and the query
``q`` rounded as ``h q ~ s p`` (``p`` its signed bytes, ``s`` its scale):

* the coded score ``a = m sum(q) + s (p . c)`` differs from ``q . v`` by at most
  ``||q|| r + ||h q - s p|| ||c||`` (Cauchy-Schwarz; ``r = ||v - m - h c||``, both known per
  row, their maxima kept), and the float32 scan's score from ``q . v`` by at most
  ``g ||q|| ||v||`` (``g``: the float32 rounding bound of a ``d``-term sum); so
  ``E = ||q|| (r_max + g |v|_max) + ||h q - s p|| |c|_max`` (float64 slack added);
* the k-th best coded score minus E is a floor the exact k-th best score cannot be under;
  every row that can be in the exact top-k has a coded score within 2E of the k-th best.
  The scan scores every row, so those candidates are all found (no depth to overflow);
* they are scored exactly in their aligned groups (``shortlist.best_of``).

A row with a value outside the coded range is clipped; it is a candidate of every query
and never sets the k-th best score (its error is not in ``r_max``). Past ``MAX_OUTSIDE``
such rows the range is widened and every row coded again, as ``Shortlist`` does.

Thread-safe as ``Shortlist``: searches run concurrently under a read lock; copying rows in
or removing them takes the write lock.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from ocrr.index.shortlist import (
    MAX_OUTSIDE,
    NORM_MARGIN,
    UNIT_ROUNDOFF,
    WIDEN,
    FullScan,
    aligned_group,
    positions_after_removal,
    settle,
)
from ocrr.utils.grow_ahead import GrowAhead, room_at_open
from ocrr.utils.rwlock import RWLock

_LEVELS = 127  # codes and query bytes in [-127, 127]: products fit VNNI's signed bytes
_SLACK = 1 + 1e-6  # float64 rounding of the scores and norms, many times over
_INITIAL_ROWS = 1024
# Rows coded at once: each float64 temporary takes 0.4 MB, which the allocator reuses. Coded
# whole, thousands of rows made temporaries so large that touching their fresh memory cost
# ten times the coding in blocks (docs/reference/measurements.md).
_ADD_ROWS = 128
# A query with more candidates than this (many rows nearly tied with its k-th best) is
# scanned in full: scoring them one group at a time would cost more.
_MOST_CANDIDATES = 256


class Int8Shortlist:
    """``search(matrix, queries, k, full_scan)`` = ``full_scan(matrix, queries, k)``, from
    signed 8-bit codes (``Shortlist``'s interface; ``code`` is ``"i8"``)."""

    code = "i8"

    def __init__(self, dim: int, codes: np.ndarray | None = None):
        """``codes``: an empty (rows, dim) int8 buffer for the first rows' codes (memory to be
        shared: ``ocrr.service.shared_rows``); None: made as the rows come."""
        self.dim = dim
        self.group = aligned_group(dim)  # rows scored together (None: every search is a full scan)
        self.gamma = dim * UNIT_ROUNDOFF / (1 - dim * UNIT_ROUNDOFF)
        self._codes = np.empty((0, dim), np.int8) if codes is None else codes  # room for more rows than are held
        self._n = 0  # rows held
        self._centre = self._step = 0.0  # the range: codes -127..127 stand for centre + step * code
        self._outside = np.empty(0, np.int64)  # positions of rows past the range, ascending
        self.err_max = self.norm_max = self.code_norm_max = 0.0  # the bounds' maxima (never shrink)
        self.queries = self.fallbacks = 0  # for /metrics: queries searched, and those scanned in full
        self._rows = RWLock()  # read: a search; write: rows copied in or removed
        self._count = threading.Lock()  # the counters above
        self._ahead: GrowAhead | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """The codes held: one byte per stored value."""
        return self.dim * self._n

    def grow_ahead(self) -> None:
        """Make each bigger code buffer in a background thread before this one fills
        (``ocrr.utils.grow_ahead``): for a long-lived copy that answers requests."""
        if self._ahead is None:
            self._ahead = GrowAhead()

    def join_ahead(self) -> None:
        """Wait for the buffer being made in the background, if any (tests)."""
        if self._ahead is not None:
            self._ahead.join()

    def snapshot(self) -> dict:
        """What, beside its codes, a copy of this shortlist needs (``from_snapshot``)."""
        with self._rows.read():
            return {
                "rows": self._n,
                "centre": self._centre,
                "step": self._step,
                "outside": self._outside.tolist(),
                "bounds": (self.err_max, self.norm_max, self.code_norm_max),
            }

    @classmethod
    def from_snapshot(cls, dim: int, codes: np.ndarray, snapshot: dict) -> Int8Shortlist:
        """The shortlist ``snapshot`` was taken of, over ``codes`` (a writable (capacity, dim)
        int8 buffer whose first rows are its codes, e.g. mapped from another process): its
        later rows are coded into that buffer while they fit."""
        made = cls(dim, codes)
        made._n, made._centre, made._step = snapshot["rows"], snapshot["centre"], snapshot["step"]
        made._outside = np.asarray(snapshot["outside"], np.int64)
        made.err_max, made.norm_max, made.code_norm_max = snapshot["bounds"]
        return made

    # -- rows in and out ------------------------------------------------------------------
    def catch_up(self, matrix: np.ndarray) -> None:
        """Code the rows of ``matrix`` added since the last call."""
        if len(matrix) <= self._n:
            return
        with self._rows.write():
            new = matrix[self._n :]
            if not len(new):  # another search coded them meanwhile
                return
            if not self._n:  # the first pass over a ledger: sized once, with room to grow
                self._room_for(len(matrix))
            with np.errstate(invalid="ignore"):
                lo, hi = float(np.min(new)), float(np.max(new))
            if not (np.isfinite(lo) and np.isfinite(hi)):
                self._add(new)  # infinite bounds: every search falls back until the rows go
                return
            if self._step == 0.0 or self._must_widen(new, lo, hi):
                if self._n:
                    old = matrix[: self._n]
                    lo, hi = min(lo, float(np.min(old))), max(hi, float(np.max(old)))
                self._start_range(lo, hi)
                new = matrix
            self._add(new)

    def _must_widen(self, new: np.ndarray, lo: float, hi: float) -> bool:
        low, high = self._centre - _LEVELS * self._step, self._centre + _LEVELS * self._step
        if low <= lo and hi <= high:
            return False
        beyond = int(np.count_nonzero(((new < low) | (new > high)).any(axis=1)))
        return len(self._outside) + beyond > MAX_OUTSIDE

    def _start_range(self, lo: float, hi: float) -> None:
        """A range holding [lo, hi] with room to spare; every row is coded again after it."""
        pad = WIDEN * max(hi - lo, 1e-6)
        lo, hi = lo - pad, hi + pad
        self._centre, self._step = (lo + hi) / 2, (hi - lo) / (2 * _LEVELS)
        self._n = 0
        self._outside = np.empty(0, np.int64)
        self.err_max = self.norm_max = self.code_norm_max = 0.0
        self._forget_ahead()

    def _forget_ahead(self) -> None:
        """Rows held were re-coded or moved: a buffer made ahead holds their old codes."""
        if self._ahead is not None:
            self._ahead = GrowAhead()

    def _add(self, rows: np.ndarray) -> None:
        for lo in range(0, len(rows), _ADD_ROWS):  # small temporaries: fresh memory is slow here
            self._add_block(rows[lo : lo + _ADD_ROWS])

    def _add_block(self, rows: np.ndarray) -> None:
        wide = np.asarray(rows, np.float64)
        finite = np.isfinite(wide).all(axis=1)  # a row that is not: an infinite bound, every search in full
        if self._step == 0.0 or not finite.all():  # rare: no range yet, or values that are not finite
            self._add_rare(wide)
            return
        scaled = np.rint((wide - self._centre) / self._step)
        beyond = (np.abs(scaled) > _LEVELS).any(axis=1)
        codes = np.clip(scaled, -_LEVELS, _LEVELS).astype(np.int8)
        missed = wide - (self._centre + self._step * codes)
        err = np.sqrt(np.einsum("ij,ij->i", missed, missed)) * NORM_MARGIN
        norms = np.sqrt(np.einsum("ij,ij->i", wide, wide)) * NORM_MARGIN
        if beyond.any():  # clipped: no bound of their own; every search scores them exactly
            self._outside = np.concatenate([self._outside, self._n + np.flatnonzero(beyond)])
            err, inside = err[~beyond], codes[~beyond]
        else:
            inside = codes
        self.norm_max = max(self.norm_max, float(norms.max()))
        if len(inside):  # sums of squared integers: exact
            self.err_max = max(self.err_max, float(err.max()))
            self.code_norm_max = max(self.code_norm_max, float(np.sqrt(_square_sums(inside).max())))
        self._append(codes)

    def _add_rare(self, wide: np.ndarray) -> None:
        """Rows with values that are not finite (or before any range): no bound holds, so
        every later search is a full scan (the bounds never shrink) and the codes are never
        read; zeros keep the rows' places."""
        self.err_max = self.norm_max = np.inf
        self._append(np.zeros(wide.shape, np.int8))

    def _append(self, codes: np.ndarray) -> None:
        buf = self._reserve(len(codes))
        buf[self._n : self._n + len(codes)] = codes
        self._n += len(codes)

    def _room_for(self, rows: int) -> None:
        """Before the first pass codes a whole ledger: a buffer that leaves a quarter free
        once they are in (``room_at_open``), so that a buffer grown ahead (made from three
        quarters full) is not made, and filled, beside it at once. Later rows double it as before."""
        if 4 * rows <= 3 * len(self._codes):
            return
        grown = np.empty((room_at_open(rows, _INITIAL_ROWS), self.dim), np.int8)
        grown[: self._n] = self._codes[: self._n]
        self._codes = grown  # a search holding the old buffer reads rows that never change

    def _reserve(self, extra: int) -> np.ndarray:
        """The code buffer, with room for ``extra`` more rows (doubling, as the ledger's)."""
        buf, need = self._codes, self._n + extra
        if need > len(buf):
            grown = self._ahead.take(buf, self._n, need) if self._ahead is not None else None
            if grown is None:
                grown = np.empty((max(need, 2 * len(buf), _INITIAL_ROWS), self.dim), np.int8)
                grown[: self._n] = buf[: self._n]
            self._codes = buf = grown  # a search holding the old buffer reads rows that never change
        if self._ahead is not None:
            self._ahead.watch(buf, self._n)
        return buf

    def remove_rows(self, rows: np.ndarray) -> None:
        """Drop the rows at these positions; the rest keep their order (as the matrix's rows
        do when an index removes entries). The bounds stay bounds: they never shrink."""
        with self._rows.write():
            rows = np.asarray(rows, np.int64)
            gone = np.unique(rows[(rows >= 0) & (rows < self._n)])
            if not len(gone):
                return
            keep = np.ones(self._n, bool)
            keep[gone] = False
            kept = self._codes[: self._n][keep]  # a copy: no search reads the codes meanwhile (write lock)
            self._codes[: len(kept)] = kept
            self._n = len(kept)
            self._forget_ahead()
            if len(self._outside):  # the rows past the range move down as the others do
                self._outside = positions_after_removal(self._outside, gone)

    # -- searching -----------------------------------------------------------------------
    def search(
        self, matrix: np.ndarray, queries: np.ndarray, k: int, full_scan: FullScan, ids: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of each query over the rows of ``matrix``: (sims, ids), best first.
        ``ids``: each row's id (ties go to the higher id), None for row numbers;
        ``full_scan(matrix, queries, k)`` answers what the codes cannot settle."""
        self.catch_up(matrix)
        n, kk = len(matrix), min(k, len(matrix))
        with self._rows.read():
            bounds = (self.err_max, self.norm_max, self.code_norm_max)
            outside = self._outside[self._outside < n].tolist()
            if (
                kk == 0
                or kk >= n - len(outside)
                or self._n < n  # rows removed since this matrix was taken
                or not np.isfinite(sum(bounds))
                or not self.group
                or not dot_is_exact(self.dim)
            ):
                return self._all_full(matrix, queries, k, full_scan)
            bytes_, scale, bound = self._round(queries, *bounds)
            dots = _dots(bytes_, self._codes[:n])  # rows past n (copied in by a newer search) left out
        # a >= floor  <=>  dots >= (floor - centre * sum(q)) / s: the kth and floor in dot units
        ranked = dots
        if outside:  # never the k-th best
            ranked = dots.copy()
            ranked[:, outside] = -np.inf
        kth = kth_largest(ranked, kk)
        ok = scale > 0
        floor = kth - 2 * bound / np.where(ok, scale, 1.0)
        ok &= np.isfinite(floor)

        def near_of(j: int) -> list[int] | None:
            near = np.flatnonzero(dots[j] >= floor[j])
            return near.tolist() + outside if len(near) + len(outside) <= _MOST_CANDIDATES else None

        sims, out, redo = settle(matrix, queries, k, kk, ok, near_of, self.group, ids, full_scan)
        self._counted(len(queries), redo)
        return sims, out

    def _round(
        self, queries: np.ndarray, err_max: float, norm_max: float, code_norm_max: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each query rounded to signed bytes (``h q ~ s p``): (p, s, E of the bound above);
        s is 0 for a query that cannot be rounded (zero or not finite: scanned in full)."""
        wide = np.asarray(queries, np.float64)
        scaled = self._step * wide
        scale = np.abs(scaled).max(axis=1) / _LEVELS
        if not (np.isfinite(scale).all() and scale.all()):  # rare: round the others, skip these
            scale = np.where(np.isfinite(scale) & (scale > 0), scale, 0.0)
            scaled = np.where(scale[:, None] > 0, scaled, 0.0)
        safe = np.where(scale > 0, scale, 1.0)[:, None]
        bytes_ = np.rint(scaled / safe)
        missed = scaled - safe * bytes_
        # einsum: each row's sum of squares without the temporaries np.linalg.norm makes
        bound = (
            np.sqrt(np.einsum("ij,ij->i", wide, wide)) * (err_max + self.gamma * norm_max)
            + np.sqrt(np.einsum("ij,ij->i", missed, missed)) * code_norm_max
        ) * _SLACK + 1e-12
        return bytes_.astype(np.int8), scale, bound

    def _all_full(
        self, matrix: np.ndarray, queries: np.ndarray, k: int, full_scan: FullScan
    ) -> tuple[np.ndarray, np.ndarray]:
        self._counted(len(queries), len(queries))
        return full_scan(matrix, queries, k)

    def _counted(self, queries: int, fallbacks: int) -> None:
        with self._count:
            self.queries += queries
            self.fallbacks += fallbacks


def _square_sums(codes: np.ndarray) -> np.ndarray:
    """Each row's sum of squared codes, exactly (int64)."""
    wide = codes.astype(np.int64)
    return np.einsum("ij,ij->i", wide, wide)


_BLOCK = 64  # kth_largest's block of scores: their maxima are a short list to select from


def kth_largest(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's ``k``-th largest score: ``np.partition(scores, n - k, axis=1)[:, n - k]``,
    selecting among far fewer. Take each block's maximum: the ``k`` largest maxima are ``k``
    scores, so the k-th largest maximum ``t`` is at most the row's k-th largest score, and
    the scores of at least ``t`` (a few blocks' worth) hold the row's top ``k``."""
    rows, n = scores.shape
    blocks = n // _BLOCK
    if blocks < k:  # too few blocks to bound it: a short row anyway
        return np.partition(scores, n - k, axis=1)[:, n - k]
    maxima = scores[:, : blocks * _BLOCK].reshape(rows, blocks, _BLOCK).max(axis=2)
    if blocks * _BLOCK < n:
        maxima = np.concatenate([maxima, scores[:, blocks * _BLOCK :].max(axis=1, keepdims=True)], axis=1)
    floor = np.partition(maxima, maxima.shape[1] - k, axis=1)[:, maxima.shape[1] - k]
    out = np.empty(rows, scores.dtype)
    for j in range(rows):
        top = scores[j][scores[j] >= floor[j]]
        out[j] = np.partition(top, len(top) - k)[len(top) - k]
    return out


def _dots(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(queries, rows) integer dot products of signed bytes, as float64 (exact)."""
    import simsimd

    if not len(codes):
        return np.empty((len(queries), 0))
    return np.asarray(simsimd.cdist(queries, codes, metric="dot"), np.float64).reshape(len(queries), len(codes))


@functools.cache
def dot_is_exact(dim: int) -> bool:
    """Whether SimSIMD's int8 dot products of ``dim`` bytes here equal numpy's int64 ones, on
    random codes and the extremes (once per process and dimension; False: every search is a
    full scan)."""
    rng = np.random.default_rng(dim)
    codes = rng.integers(-_LEVELS, _LEVELS + 1, (33, dim)).astype(np.int8)
    codes[0], codes[1] = _LEVELS, -_LEVELS  # the largest sums of either sign
    queries = rng.integers(-_LEVELS, _LEVELS + 1, (3, dim)).astype(np.int8)
    queries[0] = _LEVELS
    want = (queries.astype(np.int64) @ codes.astype(np.int64).T).astype(np.float64)
    try:
        return bool(np.array_equal(_dots(queries, codes), want))
    except Exception:  # noqa: BLE001 - a SimSIMD that cannot do this: the full scan answers
        return False
