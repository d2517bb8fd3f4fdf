"""``certified_sq8``: scan 8-bit codes, re-rank from float32, and prove the answer is exact.

Each stored vector is kept twice: its float32 row (borrowed from the owner's buffer when it
can be, as ``exact`` does; a memory-mapped file works too) and an 8-bit code (FAISS QT_8bit,
a quarter of the bytes). A query scans the codes for its approximate best ``probe`` rows
and re-scores candidates from the float32 rows. Why the result is the exact top k:

* For every coded row r, ``|approx_r - exact_r| <= |q| * bound_r``, where ``bound_r`` is the
  row's quantisation residual ``|v_r - decode(code_r)|``, measured when the row is encoded,
  plus what float32 rounding can add to either score (``_rounding_slack``).
* ``L``, the k-th largest lower bound ``approx_r - |q| bound_r``, is then at most the k-th
  largest exact score, so every row of the exact top k (ties included) has
  ``approx_r + |q| bound_r >= L``: those are the candidates.
* A row the code scan did not list has ``approx_r <= approx_(probe)``; when
  ``approx_(probe) + |q| max(bound) < L`` no such row can be a candidate, and the answer is
  certified. Otherwise that query falls back to the full float32 scan (counted in
  ``fallbacks``), so the answer is exact either way.

Exact means: equal to a float32 matrix-vector product of the query with every row, sorted
by similarity desc, then id desc (what ``ExactIndex`` does for a single query). Candidates
are re-scored in whole aligned blocks of ``_BLOCK`` rows so BLAS sums each row as the full
product does (the tests check bit equality); a batch of queries is answered query by query,
so against ``ExactIndex``'s matrix product for many queries only similarities within an ulp
of each other could order differently.

Rows added before ``min_train`` are searched exactly; then the quantiser is trained on them
(its per-dimension ranges widened by ``sq_range_expand``, as ``exact_sq8`` does) and every
later row is coded on arrival. A removal re-codes the remaining rows with the same quantiser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ocrr.index.exact import ExactIndex, rows_and_ids, top_k
from ocrr.index.faiss_index import sq8_codes

_BLOCK = 16  # rows re-scored together, aligned as in the full product (BLAS sums rows in groups)
_UNIT_ROUNDOFF = 2.0**-24  # float32


def _faiss() -> Any:
    import faiss  # imported lazily: only approximate backends need it

    return faiss


def _rounding_slack(dim: int, norms: np.ndarray, decoded_norms: np.ndarray, decode_error: float) -> np.ndarray:
    """Per row, with |q| factored out: how far float32 arithmetic can move either score.

    A float32 dot product of d terms is within gamma_d * |q| |v| of the real one, whatever the
    order of summation (gamma_d = d u / (1 - d u)); FAISS's decoding may differ from
    ``sa_decode``'s by ``decode_error`` per component, at most sqrt(d) |q| decode_error in all.
    Doubled, to leave room for the rounding of the bound itself."""
    gamma = dim * _UNIT_ROUNDOFF / (1 - dim * _UNIT_ROUNDOFF)
    return 2.0 * (gamma * (norms + decoded_norms) + np.sqrt(dim) * decode_error)


class CertifiedSQ8Index:
    """Exact search through an 8-bit scan and a certified float32 re-rank (module docstring)."""

    name = "certified_sq8"
    exact = True  # proven, not sampled: recall 1.0
    supports_start = False

    def __init__(
        self,
        dim: int,
        source: Callable[[], np.ndarray] | None = None,
        min_train: int = 4096,
        sq_range_expand: float = 0.5,
        probe: int = 256,
    ):
        if min_train < 1 or probe < 1 or sq_range_expand < 0:
            raise ValueError("certified_sq8 needs min_train >= 1, probe >= 1 and sq_range_expand >= 0")
        self.dim = dim
        self.min_train, self.sq_range_expand, self.probe = int(min_train), float(sq_range_expand), int(probe)
        # rows in order: row i is FAISS position i; the full scan a proof falls back to stays
        # float32 (this index is already the compressed scan)
        self.floats = ExactIndex(dim, source=source, shortlist=False)
        self._codes: Any = None  # the FAISS IndexScalarQuantizer, once trained
        self._bound = np.empty(0, np.float64)  # per coded row, |approx - exact| / |q| at most
        self._max_bound = 0.0
        self._decode_error = 0.0
        self.certified = 0  # queries answered from the codes, proven exact
        self.fallbacks = 0  # queries the proof did not cover: answered by the full scan

    def __len__(self) -> int:
        return len(self.floats)

    @property
    def epoch(self) -> int:
        return self.floats.epoch

    @property
    def ids(self) -> np.ndarray:
        return self.floats.ids

    @property
    def vectors(self) -> np.ndarray:
        return self.floats.vectors

    @property
    def coded(self) -> int:
        return 0 if self._codes is None else int(self._codes.ntotal)

    @property
    def nbytes(self) -> int:
        codes = self.coded * self.dim  # one byte per component
        return int(self.floats.nbytes + codes + self._bound.nbytes)

    # -- adding and removing ------------------------------------------------------------------
    def add(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        vecs, ids = rows_and_ids(vecs, ids, self.dim)
        self.floats.add(vecs, ids)
        self._code_new_rows()

    def add_from_source(self, vecs: np.ndarray, ids: np.ndarray) -> None:
        self.floats.add_from_source(vecs, ids)
        self._code_new_rows()

    def remove(self, ids: np.ndarray) -> None:
        self.floats.remove(ids)
        if self._codes is not None:  # positions moved: re-code the rows left, same quantiser
            self._codes.reset()
            self._bound = np.empty(0, np.float64)
            self._max_bound = 0.0
            self._code_new_rows()

    def train(self, sample: np.ndarray) -> None:
        """Train the quantiser on ``sample`` now instead of on the first ``min_train`` rows."""
        faiss = _faiss()
        sample = np.ascontiguousarray(sample, np.float32).reshape(-1, self.dim)
        if len(sample) == 0:
            raise ValueError("train needs at least one vector")
        index = sq8_codes(self.dim, self.sq_range_expand)  # the codes exact_sq8 scans
        index.train(sample)
        trained = faiss.vector_to_array(index.sq.trained).astype(np.float64)  # vmin per dim, then vdiff
        self._decode_error = 8 * float(np.finfo(np.float32).eps) * float(np.abs(trained).max(initial=0.0))
        self._codes = index
        self._code_new_rows()

    def _code_new_rows(self) -> None:
        if self._codes is None:
            if len(self.floats) >= self.min_train:
                self.train(self.floats.vectors)
            return
        start, stop = self.coded, len(self.floats)
        if stop == start:
            return
        rows = np.ascontiguousarray(self.floats.vectors[start:stop], np.float32)
        self._codes.add(rows)
        decoded = self._codes.reconstruct_n(start, stop - start)
        residual = np.linalg.norm(rows.astype(np.float64) - decoded, axis=1)
        norms = np.linalg.norm(rows.astype(np.float64), axis=1)
        decoded_norms = np.linalg.norm(decoded.astype(np.float64), axis=1)
        bound = (residual + _rounding_slack(self.dim, norms, decoded_norms, self._decode_error)) * (1 + 1e-9)
        self._bound = np.concatenate([self._bound, bound])
        self._max_bound = max(self._max_bound, float(bound.max()))

    # -- searching ------------------------------------------------------------------------------
    def search(self, queries: np.ndarray, k: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of each query (module docstring); ``start`` must be 0."""
        if start:
            raise ValueError("certified_sq8 cannot restrict a search to later rows (supports_start is False)")
        queries = np.ascontiguousarray(queries, np.float32).reshape(-1, self.dim)
        n_q, n_rows = len(queries), len(self.floats)
        kk = min(k, n_rows)
        if self._codes is None or kk == 0 or n_q == 0:
            return self.floats.search(queries, k)
        probe = min(self.coded, max(self.probe, 2 * kk))
        approx, rows = self._codes.search(queries, probe)
        out_s = np.empty((n_q, kk), np.float32)
        out_i = np.empty((n_q, kk), np.int64)
        for i in range(n_q):
            found = self._certified_one(queries[i], approx[i], rows[i], kk)
            if found is None:
                self.fallbacks += 1
                found = self.floats.search(queries[i : i + 1], kk)
            else:
                self.certified += 1
            out_s[i], out_i[i] = found[0][0], found[1][0]
        return out_s, out_i

    def _certified_one(
        self, query: np.ndarray, approx: np.ndarray, rows: np.ndarray, kk: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The exact top kk of one query from its code scan, or None when it cannot be proven."""
        listed = rows >= 0
        approx, rows = approx[listed].astype(np.float64), rows[listed]
        q_norm = float(np.linalg.norm(query.astype(np.float64)))
        slack = q_norm * self._bound[rows]
        lower = approx - slack
        if len(lower) < kk:
            return None
        floor = np.partition(lower, len(lower) - kk)[len(lower) - kk]  # <= the exact k-th score
        if len(rows) < self.coded and approx[-1] + q_norm * self._max_bound >= floor:
            return None  # a row the scan did not list might still reach the top k
        candidates = np.sort(rows[approx + slack >= floor])
        sims = self._rescore(query, candidates)
        ids = candidates.astype(np.int64) if self.floats.borrowed else self.floats.ids[candidates]
        return top_k(sims[None], ids[None], kk)

    def _rescore(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """float32 similarities of ``rows``, each summed as in the product over every row: the
        rows are gathered in whole aligned blocks (the last one as short as the index's)."""
        matrix = self.floats.vectors
        n = len(matrix)
        blocks = np.unique(rows // _BLOCK)
        starts = blocks * _BLOCK
        span = (starts[:, None] + np.arange(_BLOCK)).ravel()
        span = span[span < n]
        sims = np.asarray(matrix[span], np.float32) @ query
        return sims[np.searchsorted(span, rows)]
