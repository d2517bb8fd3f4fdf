"""A worker holds an 8-bit copy of the ledger's rows only when its searches read it: a
substrate whose index answers each request itself (a bounded one, over its live rows) keeps
no coded copy of every stored row, and answers as before."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ocrr.systems.substrate.persistent import open_substrate

DIM = 16


def _served(tmp_path, system: str, n: int = 3000):
    requests = pytest.importorskip("requests")
    pytest.importorskip("fastapi")
    from service_helpers import running

    from ocrr.service.app import create_app
    from ocrr.service.state import ServiceState

    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    sub = open_substrate(tmp_path / "l.db", system)
    sub.correct(vecs, [f"c{i % 5}" for i in range(n)], [f"t{i}" for i in range(n)])
    queries = vecs[:20] + rng.normal(0, 0.05, (20, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    want = [sub.explain(q[None])[0].label for q in queries]
    state = ServiceState(substrate=sub, token="t" * 20)
    with running(create_app(state, inline_floats=0)) as url, requests.Session() as s:
        got = [s.post(f"{url}/predict", data=json.dumps({"vectors": [q.tolist()]})).json() for q in queries]
    sub.close()
    return state.pool, want, [a["predictions"][0]["label"] for a in got]


def test_a_bounded_substrate_keeps_no_coded_copy_of_every_row(tmp_path):
    pool, want, got = _served(tmp_path, "bounded_fifo_100")
    assert got == want
    assert pool.shortlist is None


def test_the_exact_substrate_still_pools_through_its_coded_copy(tmp_path):
    pool, want, got = _served(tmp_path, "substrate")
    assert got == want
    assert pool.shortlist is not None and len(pool.shortlist) == 3000
