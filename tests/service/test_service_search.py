"""The service's predict search: pooled scans and the coded shortlists (float16, 8-bit, signed bytes) give exactly the
answers of the substrate's own search (same neighbours, same similarity bits, same label),
on ledgers full of near-ties and exact duplicates, and across threads over a real socket."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.index.exact import new_shortlist
from ocrr.index.shortlist import Shortlist
from ocrr.systems.substrate.persistent import open_substrate

pytest.importorskip("faiss")


def _ledger(tmp_path, n: int, dim: int = 48, system: str = "substrate", seed: int = 0):
    """Clusters of near-duplicates (noise 0.01), plus 40 exact copies of one vector."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(max(2, n // 25), dim)).astype(np.float32)
    vecs = base[np.arange(n) % len(base)] + rng.normal(0, 0.01, (n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[-40:] = vecs[0]
    sub = open_substrate(tmp_path / f"{system}-{n}.db", system)
    sub.correct(vecs, [f"label{i % 7}" for i in range(n)], [f"t{i}" for i in range(n)])
    queries = [
        vecs[rng.integers(n)][None] + rng.normal(0, s, (1, dim)).astype(np.float32)
        for s in (0.0, 0.005, 0.02, 0.2)
        for _ in range(15)
    ]
    queries += [
        vecs[:1],
        vecs[3:6],
        vecs[7:9] * 3.0,
        np.repeat(vecs[-1:], 7, axis=0),
        vecs[:9],
    ]  # a copy, a batch, scaled
    return sub, vecs, [np.ascontiguousarray(q, np.float32) for q in queries]


CODES = ["fp16", "sq8", "i8"]


def _shortlist(dim: int, code: str, depth: int):
    """A shortlist of ``code``; ``depth`` for the FAISS ones (the i8 scan scores every row)."""
    return Shortlist(dim, depth=depth, code=code) if code != "i8" else new_shortlist(dim, code)


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize("n", [5, 70, 1000, 2053])
def test_pooled_and_shortlisted_answers_are_the_search_bits(tmp_path, n, code):
    sub, _, queries = _ledger(tmp_path, n)
    alone = [sub.explain(q) for q in queries]
    shortlist = _shortlist(sub.ledger.dim, code, depth=32)
    assert sub.explain_each(queries) == alone  # Explanation equality: ids, labels, float similarities
    assert sub.explain_each(queries, shortlist) == alone
    assert shortlist.queries > 0
    if n >= 1000:  # most queries are answered from the shortlist
        assert shortlist.fallbacks < shortlist.queries / 2
        # the 40 copies overflow a FAISS shortlist's depth; the i8 scan has none to overflow
        assert (shortlist.fallbacks > 0) == (code != "i8")
    sub.correct(queries[0], ["late"])  # rows added after the shortlist was built are seen
    assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
    sub.close()


def test_vectors_float16_cannot_hold_are_scanned_in_full(tmp_path):
    sub, vecs, queries = _ledger(tmp_path, 300)
    # beyond float16's range: no error bound. Every door of a ledger refuses such rows now
    # (correct(), the ledger's appends, open_substrate), so they go to the in-memory
    # substrate itself, past its durable ledger, as a ledger written before the rules held them
    sub.system.correct(Batch(vecs[:2] * 1e6, labels=["huge", "huge"]))
    shortlist = Shortlist(sub.ledger.dim)
    assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
    assert shortlist.fallbacks == shortlist.queries
    sub.close()


def test_rows_beyond_the_8bit_range_are_scored_exactly_until_enough_widen_it(tmp_path, monkeypatch):
    import faiss

    from ocrr.index import shortlist as module

    monkeypatch.setattr(module, "MAX_OUTSIDE", 3)
    sub, vecs, queries = _ledger(tmp_path, 1500)
    shortlist = Shortlist(sub.ledger.dim, code="sq8")
    assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
    first, err = shortlist._range, shortlist.err_max
    assert first is not None and shortlist.fallbacks < shortlist.queries / 2

    def axis(d: int) -> np.ndarray:  # a unit row along one axis: a value far past every stored one
        row = np.zeros((1, sub.ledger.dim), np.float32)
        row[0, d] = 1.0
        return row

    for d in range(3):  # within the allowance: kept as they are, scored exactly by every search
        sub.correct(axis(d), [f"axis{d}"])
        queries.append(axis(d))
        assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
        assert sub.explain(axis(d))[0].label == f"axis{d}"  # its own nearest neighbour, found
    assert shortlist._range == first and shortlist.err_max == err  # not re-coded, bound unchanged
    assert shortlist._outside.tolist() == [1500, 1501, 1502]
    sub.correct(axis(3), ["axis3"])  # one past the allowance: wider range, every row coded again
    queries.append(axis(3))
    assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
    start, width = shortlist._range
    assert start + width >= 1.0 > first[0] + first[1] and len(shortlist._outside) == 0
    assert np.allclose(faiss.vector_to_array(shortlist.index.sq.trained), (start, width))  # coded with it
    matrix = sub.system.ledger_.vectors[: len(sub)]
    assert np.array_equal(shortlist._codes(0, len(shortlist)), shortlist.index.sa_encode(matrix))
    assert shortlist.err_max < 0.1  # none clipped (a clipped axis row would be off by ~0.4)
    sub.close()


def test_rows_beyond_the_8bit_range_keep_their_place_when_others_are_removed():
    from ocrr.systems.substrate.persistent import _pooled_scan

    rng = np.random.default_rng(8)
    vecs = rng.normal(size=(2000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    shortlist = Shortlist(32, depth=16, code="sq8")
    shortlist.catch_up(vecs[:1000])
    far = [1100, 1500, 1900]
    vecs[far] *= 4  # past the range fitted to the first 1,000
    shortlist.catch_up(vecs)
    assert shortlist._outside.tolist() == far
    gone = np.array([3, 1100, 1200, 1950])  # one of them among the removed
    shortlist.remove_rows(gone)
    matrix = np.delete(vecs, gone, axis=0)
    assert shortlist._outside.tolist() == [1500 - 3, 1900 - 3]
    queries = np.ascontiguousarray(matrix[[1497, 1897, 10, 700]] + 0.01, np.float32)
    got = shortlist.search(matrix, queries, 5, _pooled_scan)
    want = _pooled_scan(matrix, queries, 5)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert shortlist.fallbacks == 0


def test_a_shortlist_names_its_codes():
    with pytest.raises(ValueError, match="fp16.*sq8"):
        Shortlist(8, code="int4")


def test_an_index_replaces_its_shortlist_when_asked_for_another_code():
    from ocrr.index.exact import ExactIndex

    index = ExactIndex(8)
    half = index.shortlist()
    assert half.code == "fp16" and index.shortlist() is half and index.shortlist("fp16") is half
    eight = index.shortlist("sq8")
    assert eight.code == "sq8" and index.shortlist() is eight


def test_a_bounded_substrate_is_searched_by_its_own_index(tmp_path):
    sub, _, queries = _ledger(tmp_path, 400, system="bounded_fifo_100")
    shortlist = Shortlist(sub.ledger.dim)
    assert sub.explain_each(queries, shortlist) == [sub.explain(q) for q in queries]
    assert shortlist.queries == 0  # its index holds only the live entries: nothing pooled
    sub.close()


@pytest.mark.parametrize("on_loop", [True, False], ids=["on-the-event-loop", "on-search-threads"])
def test_concurrent_predicts_over_a_socket_share_searches_and_answer_as_alone(tmp_path, on_loop, monkeypatch):
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from service_helpers import running

    from ocrr.service.app import create_app
    from ocrr.service.pool import PredictPool
    from ocrr.service.state import ServiceState

    searched_on = []  # the thread each pooled search ran on
    search = PredictPool._search
    monkeypatch.setattr(
        PredictPool,
        "_search",
        lambda self, batch: searched_on.append(threading.current_thread().name) or search(self, batch),
    )

    sub, _, queries = _ledger(tmp_path, 3000, dim=64)
    state = ServiceState(substrate=sub, token="t" * 20)
    expected = [
        [
            {"label": e.label, "margin": e.margin, "neighbours": [n.__dict__ for n in e.neighbours]}
            for e in sub.explain(q)
        ]
        for q in queries
    ]
    pass_floats = 3000 * 64  # what a pooled pass reads: on the loop up to pool_inline_floats
    with running(create_app(state, pool_inline_floats=pass_floats if on_loop else pass_floats - 1)) as url:

        def ask(q):
            with requests.Session() as s:
                return [s.post(f"{url}/predict", data=json.dumps({"vectors": q.tolist()})).json() for _ in range(3)]

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, queries))
        metrics = requests.get(f"{url}/metrics").text
    for want, got in zip(expected, answers):
        assert all(a["predictions"] == want for a in got)
    counters = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("ocrr_")}
    pooled = 3 * sum(len(q) < 8 for q in queries)
    assert searched_on and all(name.startswith("ocrr-search") != on_loop for name in searched_on)
    assert counters["ocrr_predict_pooled_total"] == pooled
    assert 0 < counters["ocrr_predict_searches_total"] <= pooled


def test_searches_during_commits_answer_from_a_consistent_ledger(tmp_path):
    """The pass runs outside the lock while corrections are committed (some with new labels,
    which grow the label space): every answer is still the one the ledger gives alone."""
    import threading

    sub, vecs, queries = _ledger(tmp_path, 2000)
    expected = [sub.explain(q) for q in queries]
    far = -vecs[:200]  # the opposite direction: never among these queries' neighbours
    errors = []

    def commit():
        try:
            for j in range(0, 200, 4):
                sub.correct(far[j : j + 4], [f"new{j}"] * 4)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    writer = threading.Thread(target=commit)
    writer.start()
    shortlist = Shortlist(sub.ledger.dim)
    answers = []
    while writer.is_alive():
        answers.append(sub.explain_each(queries, shortlist))
    writer.join()
    assert not errors and answers and len(sub) == 2200
    assert [sub.explain(q) for q in queries] == expected  # so no new entry was ever a neighbour
    assert all(a == expected for a in answers)
    sub.close()


@pytest.mark.parametrize("code", CODES)
def test_a_shortlist_that_holds_newer_rows_answers_for_the_older_matrix(code):
    """Two searches run at once: one may copy in rows that the other's (older, shorter)
    matrix does not hold. The older search must answer for its own rows only, exactly."""
    from ocrr.systems.substrate.persistent import _pooled_scan

    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(1500, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    queries = vecs[rng.integers(1000, 1500, 20)] + rng.normal(0, 0.01, (20, 32)).astype(np.float32)  # near new rows
    shortlist = _shortlist(32, code, depth=16)
    shortlist.catch_up(vecs)  # the newer matrix
    older = vecs[:1000]
    sims, ids = shortlist.search(older, queries, 5, _pooled_scan)
    want_sims, want_ids = _pooled_scan(older, queries, 5)
    assert ids.max() < 1000
    assert np.array_equal(ids, want_ids) and np.array_equal(sims, want_sims)
    assert shortlist.fallbacks < shortlist.queries  # answered from the shortlist, not by full scans


@pytest.mark.parametrize("code", CODES)
def test_concurrent_searches_and_appends_answer_as_a_full_scan_of_their_snapshot(code):
    from ocrr.systems.substrate.persistent import _pooled_scan

    rng = np.random.default_rng(4)
    vecs = rng.normal(size=(3000, 32)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    queries = vecs[rng.integers(0, 3000, 6)] + rng.normal(0, 0.01, (6, 32)).astype(np.float32)
    vecs[2500:2600] *= 2  # past the 8-bit range: scored exactly, then all re-coded, while others search
    shortlist = _shortlist(32, code, depth=16)

    def search(n: int):
        got = shortlist.search(vecs[:n], queries, 5, _pooled_scan)
        want = _pooled_scan(vecs[:n], queries, 5)
        return np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])

    sizes = [1000 + 20 * i for i in range(100)]
    with ThreadPoolExecutor(3) as pool:  # searches of growing snapshots, in any order, each copying rows in
        assert all(pool.map(search, sizes[::-1] + sizes))
    assert len(shortlist) == max(sizes)


@pytest.mark.parametrize("system", ["substrate", "bounded_fifo_500"])
def test_the_pool_shares_the_substrates_coded_copy_only_when_its_rows_are_the_ledgers(tmp_path, system):
    from concurrent.futures import ThreadPoolExecutor

    from ocrr.service.pool import PredictPool

    sub, _, queries = _ledger(tmp_path, 900, system=system)
    with ThreadPoolExecutor(1) as executor:
        pool = PredictPool(sub, executor, inline_floats=10**9)
        pool.warm()
    index = sub.system.index_
    if system != "substrate":  # its index answers each request (nothing pooled): no coded copy at all
        assert pool.shortlist is None and len(index.shortlist()) == 0
        return
    assert pool.shortlist is not None and len(pool.shortlist) == len(sub.ledger)
    assert pool.shortlist.code == "i8"  # a quarter of the float32 bytes to scan, as integer dot products
    assert pool.shortlist is index.shortlist()  # one copy per process
