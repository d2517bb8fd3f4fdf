"""The persistent substrate: corrections survive a restart, bounded evictions replay,
predictions come with their neighbours, and a damaged file is refused."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

import ocrr
from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.systems import make_system

DIM = 8


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, DIM))
    labels = [f"c{i % 4}" for i in range(n)]
    vecs = centres[[i % 4 for i in range(n)]] + 0.05 * rng.normal(size=(n, DIM))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32), labels


def test_corrections_survive_a_restart(tmp_path):
    path = tmp_path / "sub.db"
    vecs, labels = _data(40)
    with ocrr.open_substrate(path) as sub:
        sub.correct(vecs[:30], labels[:30], [f"t{i}" for i in range(30)])
        for i in range(30, 40):
            sub.correct(vecs[i : i + 1], [labels[i]])
        before = sub.predict(vecs)
        query = -vecs[0]
        sub.correct(query[None], ["opposite"])
        assert sub.predict(query[None]) == ["opposite"]
    with ocrr.open_substrate(path) as sub:
        assert len(sub) == 41
        assert sub.predict(vecs) == before and sub.predict(query[None]) == ["opposite"]
        assert sub.verify().ok
    # The same entries fitted in memory give the same chain: the file is the substrate's ledger.
    mem = make_system("substrate").fit(Batch(vecs[:30], [f"t{i}" for i in range(30)], labels[:30]))
    for i in range(30, 40):
        mem.correct(Batch(vecs[i : i + 1], [None], [labels[i]]))
    with ocrr.open_substrate(path) as sub:
        assert sub.system.ledger_[39].hash == mem.ledger_.head


def test_bounded_substrate_replays_its_evictions(tmp_path):
    path = tmp_path / "fifo.db"
    vecs, labels = _data(30)
    with ocrr.open_substrate(path, "bounded_fifo:budget=10") as sub:
        for i in range(30):
            sub.correct(vecs[i : i + 1], [labels[i]])
        live = sub.system.live_ids()
    with ocrr.open_substrate(path, "bounded_fifo:budget=10") as sub:
        assert np.array_equal(sub.system.live_ids(), live) and len(sub) == 30
        assert sub.system.verify().ok
    with ocrr.open_substrate(path, "bounded_reservoir:budget=10") as sub:
        assert sub.system.verify().ok and len(sub.system.live_ids()) == 10


def test_explain_returns_the_voting_neighbours(tmp_path):
    vecs, labels = _data(20)
    with ocrr.open_substrate(tmp_path / "s.db") as sub:
        sub.correct(vecs, labels)
        (ex,) = sub.explain(vecs[:1])
        assert ex.label == labels[0] and len(ex.neighbours) == 5 and ex.margin == 0.05
        assert ex.neighbours[0].id == 0 and ex.neighbours[0].votes
        sims = [n.similarity for n in ex.neighbours]
        assert sims == sorted(sims, reverse=True)


def test_errors_name_the_fix(tmp_path):
    with ocrr.open_substrate(tmp_path / "e.db") as sub:
        with pytest.raises(OcrrError, match="empty"):
            sub.predict(np.zeros((1, DIM), np.float32))
        sub.correct(*_data(4))
        with pytest.raises(OcrrError, match="dimension"):
            sub.predict(np.zeros((1, DIM + 1), np.float32))
    with pytest.raises(OcrrError, match="not a substrate"):
        ocrr.open_substrate(tmp_path / "x.db", "static_linear")
    for other_rule in ("consolidating", "robust_substrate", "static_knn"):  # substrates that answer otherwise
        with pytest.raises(OcrrError, match="open it with substrate"):
            ocrr.open_substrate(tmp_path / "x.db", other_rule)
    conn = sqlite3.connect(tmp_path / "e.db")
    conn.execute("UPDATE entries SET label = 'forged' WHERE id = 2")
    conn.commit()
    conn.close()
    with pytest.raises(OcrrError, match="damaged at entry 2"):
        ocrr.open_substrate(tmp_path / "e.db")


def test_predictions_run_while_corrections_commit(tmp_path):
    """Readers and the writer interleave (readers-writer lock): no errors, nothing lost."""
    import threading

    vecs, labels = _data(200)
    errors = []
    with ocrr.open_substrate(tmp_path / "c.db") as sub:
        sub.correct(vecs[:40], labels[:40])

        def reader():
            try:
                for _ in range(100):
                    assert sub.predict(vecs[:3])[0] is not None
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        def writer(k):
            try:
                for i in range(40 + k, 200, 4):
                    sub.correct(vecs[i : i + 1], [labels[i]])
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=reader) for _ in range(4)]
        threads += [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(sub) == 200 and sub.verify().ok
        assert sub.predict(vecs) == labels


def test_corrections_that_are_not_unit_vectors_are_refused_and_nothing_is_stored(tmp_path):
    """The ledger keeps what it is given forever, and the vote reads dot products as cosines:
    a raw (unnormalised) vector is refused with the fix, before anything is written."""
    rng = np.random.default_rng(0)
    unit = rng.standard_normal((3, 8)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    with ocrr.open_substrate(tmp_path / "l.db", "substrate") as sub:
        sub.correct(unit, ["a", "b", "a"])
        raw = unit * np.array([[1.0], [3.0], [1.0]], dtype=np.float32)
        with pytest.raises(OcrrError, match=r"row 1 has norm 3; .*Divide each row by its L2 norm"):
            sub.correct(raw, ["a", "b", "c"])
        assert len(sub.ledger) == 3
