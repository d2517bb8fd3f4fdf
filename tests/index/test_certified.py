"""certified_sq8: an 8-bit scan whose answer must be exact search's, bit for bit, proven or
fallen back on; and the bound the proof rests on must hold for every row."""

from __future__ import annotations

import numpy as np
import pytest

from ocrr.index import CertifiedSQ8Index, ExactIndex, make_index


def clustered(n: int, dim: int, seed: int, clusters: int = 40, spread: float = 0.35) -> np.ndarray:
    """Unit vectors around a few centres, as sentence embeddings of a few intents are."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_one(index: ExactIndex, query: np.ndarray, k: int):
    return index.search(query[None], k)  # one query: one matrix-vector product over every row


def assert_same(a, b) -> None:
    np.testing.assert_array_equal(a[1], b[1])  # ids, in order
    np.testing.assert_array_equal(a[0], b[0])  # similarities, bit for bit


@pytest.mark.parametrize("dim", [48, 384])
def test_single_queries_equal_exact_search_bit_for_bit(dim):
    rows = clustered(6000, dim, seed=dim)
    certified, exact = CertifiedSQ8Index(dim, min_train=1000), ExactIndex(dim)
    for lo in range(0, len(rows), 700):  # grown in batches, trained on the first 1000
        ids = np.arange(lo, min(lo + 700, len(rows)))
        certified.add(rows[ids], ids)
        exact.add(rows[ids], ids)
    assert certified.coded == len(rows)
    queries = clustered(120, dim, seed=dim + 1)
    for k in (1, 5, 16):
        for q in queries:
            assert_same(certified.search(q[None], k), exact_one(exact, q, k))
    # every query was either proven from the codes or scanned in full; how often the proof holds
    # on real embeddings is benchmarks/bench_certified.py's figure
    assert certified.certified > 0 and certified.certified + certified.fallbacks == 3 * len(queries)


def test_when_the_proof_fails_the_full_scan_answers():
    dim = 64
    rows = np.random.default_rng(0).standard_normal((3000, dim)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)  # no structure: many near the k-th score
    certified, exact = CertifiedSQ8Index(dim, min_train=500, probe=1), ExactIndex(dim)
    certified.add(rows, np.arange(3000))
    exact.add(rows, np.arange(3000))
    for q in rows[:40] * 0.5 + rows[40:80] * 0.5:
        assert_same(certified.search(q[None], 10), exact_one(exact, q, 10))
    assert certified.fallbacks > 0


def test_the_bound_holds_for_every_row_and_query():
    dim = 96
    rows = clustered(4000, dim, seed=3)
    index = CertifiedSQ8Index(dim, min_train=4000)
    index.add(rows, np.arange(4000))
    queries = np.concatenate([clustered(30, dim, seed=4), 3.0 * clustered(10, dim, seed=5)])  # not unit too
    approx, positions = index._codes.search(queries, 4000)  # every row's 8-bit score
    exact = queries @ rows.T
    for i, q in enumerate(queries):
        err = np.abs(approx[i].astype(np.float64) - exact[i, positions[i]])
        assert (err <= np.linalg.norm(q.astype(np.float64)) * index._bound[positions[i]]).all()


def test_borrowed_rows_batches_and_removal_answer_as_exact():
    dim = 48
    rows = clustered(5000, dim, seed=7)
    buffer = rows.copy()
    borrowed = CertifiedSQ8Index(dim, source=lambda: buffer, min_train=800)
    borrowed.add(rows, np.arange(5000))
    assert borrowed.floats.borrowed and borrowed.nbytes == 5000 * dim + 5000 * 8  # codes and bounds only
    exact = ExactIndex(dim)
    exact.add(rows, np.arange(5000))
    queries = clustered(30, dim, seed=8)
    batch = borrowed.search(queries, 7)
    for i, q in enumerate(queries):  # a batch is answered query by query
        assert_same((batch[0][i : i + 1], batch[1][i : i + 1]), exact_one(exact, q, 7))
    gone = np.arange(0, 5000, 3)
    borrowed.remove(gone)
    exact.remove(gone)
    assert borrowed.coded == len(exact) and borrowed.epoch == 1
    for q in queries:
        assert_same(borrowed.search(q[None], 7), exact_one(exact, q, 7))


def test_before_training_it_is_the_exact_scan_and_the_factory_builds_it():
    index = make_index("certified_sq8", 16, min_train=100)
    assert isinstance(index, CertifiedSQ8Index) and index.exact
    rows = clustered(60, 16, seed=9)
    index.add(rows, np.arange(60))
    assert index.coded == 0 and index.search(rows[:1], 3)[1][0, 0] == 0
    index.add(clustered(60, 16, seed=10), np.arange(60, 120))
    assert index.coded == 120
    with pytest.raises(ValueError, match="supports_start"):
        index.search(rows[:1], 3, start=5)


def test_a_substrate_on_it_predicts_as_on_exact_search():
    from ocrr.batch import Batch
    from ocrr.systems.registry import make_system

    dim, n = 64, 5000
    rows = clustered(n, dim, seed=11, clusters=20)
    labels = [f"intent_{i % 20}" for i in range(n)]
    seed = Batch(rows, None, labels)
    queries = Batch(clustered(200, dim, seed=12, clusters=20), None, None)
    names = sorted(set(labels))
    exact = make_system("substrate", labels=names).fit(seed)
    certified = make_system("substrate:index=certified_sq8", labels=names).fit(seed)
    assert certified.predict(queries) == exact.predict(queries)
    assert certified.index_.coded == n
