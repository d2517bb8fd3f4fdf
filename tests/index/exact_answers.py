"""Rows, queries and the bit-for-bit comparison shared by the tests of exact fast paths
(the float16 shortlist, anticipated queries): each must answer as the plain scan does."""

from __future__ import annotations

import numpy as np

from ocrr.index.exact import ExactIndex


def tie_heavy_rows(n: int, dim: int, seed: int) -> np.ndarray:
    """Unit rows on a coarse lattice (many exact ties) with runs of exact duplicates."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal((n, dim)) * 2) / 2
    x[np.all(x == 0, axis=1), 0] = 1.0
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    for start in rng.choice(n - 8, size=n // 200, replace=False):
        x[start : start + rng.integers(2, 8)] = x[start]
    return x


def queries_from(x: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` queries near stored rows and ``n`` equal to stored rows (their duplicates tie at the top)."""
    rng = np.random.default_rng(seed)
    near = x[rng.choice(len(x), n)] + 0.01 * rng.standard_normal((n, x.shape[1])).astype(np.float32)
    same = x[rng.choice(len(x), n)]
    return np.concatenate([near, same]).astype(np.float32)


def index_of(x: np.ndarray, borrowed: bool, ids: np.ndarray | None = None, shortlist: bool = False) -> ExactIndex:
    """An exact index over the rows ``x``: borrowing them (ids: row numbers) or owning a copy."""
    dim = x.shape[1]
    if borrowed:
        index = ExactIndex(dim, source=lambda: x, shortlist=shortlist)
        index.add_from_source(x, np.arange(len(x)))
    else:
        index = ExactIndex(dim, shortlist=shortlist)
        index.add(x, np.arange(len(x)) if ids is None else ids)
    return index


def assert_same_answers(
    fast: ExactIndex, plain: ExactIndex, queries: np.ndarray, k: int, widths: tuple[int, ...] = (1, 3, 7)
) -> None:
    """Ids equal and similarities the same bits, for searches of each width (all below the
    matrix-product path)."""
    for width in widths:
        for lo in range(0, len(queries) - width + 1, width):
            q = queries[lo : lo + width]
            got_s, got_i = fast.search(q, k)
            want_s, want_i = plain.search(q, k)
            assert np.array_equal(got_i, want_i), (width, lo)
            assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32)), (width, lo)
