"""The pooled predict runs its search on the event loop when it reads few numbers: an IVF
index's probed lists are a small share of a ledger whose full scan would go to a search
thread. Shown with a search pool that is shut down: a search sent to it fails."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ocrr.service.pool import PredictPool
from ocrr.systems.substrate.persistent import open_substrate

pytest.importorskip("faiss")

ENTRIES, DIM = 21_000, 16


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(30, DIM))
    vecs = centres[rng.integers(30, size=ENTRIES)] + 0.4 * rng.normal(size=(ENTRIES, DIM))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    path = tmp_path_factory.mktemp("pool") / "l.db"
    with open_substrate(path) as sub:
        sub.correct(vecs, [f"c{i % 30}" for i in range(ENTRIES)], [f"t{i}" for i in range(ENTRIES)])
    return path, vecs[:3] + 0.01


def _pooled(sub, queries, inline_floats: int):
    """``explain`` of each query through a pool whose search threads are gone."""
    threads = ThreadPoolExecutor(1)
    threads.shutdown()
    pool = PredictPool(sub, threads, inline_floats, shortlist=False)

    async def ask():
        return await asyncio.gather(*(pool.explain(sub.check_queries(q[None])) for q in queries))

    return asyncio.run(ask())


def test_an_ivf_search_is_answered_on_the_loop(ledger):
    path, queries = ledger
    full_scan = ENTRIES * DIM
    with open_substrate(path, "substrate:index=ivf_sq8:nlist=64:nprobe=8:rerank=50") as sub:
        assert _pooled(sub, queries, inline_floats=full_scan // 4) == [sub.explain(q[None]) for q in queries]


def test_an_exact_scan_over_more_numbers_goes_to_a_search_thread(ledger):
    path, queries = ledger
    with open_substrate(path) as sub, pytest.raises(RuntimeError):
        _pooled(sub, queries, inline_floats=ENTRIES * DIM - 1)
