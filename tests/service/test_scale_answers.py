"""At 100k entries the service answers predicts by vector with the exact vote.

The ledger is built through the bulk path (``DurableLedger.extend`` in large blocks), the
service opens it as ``ocrr serve`` does, and single-vector predicts sent concurrently over a
socket (so they share pooled passes through the 8-bit shortlist) must carry the labels of a
separate exact search and vote: a substrate fitted in memory on the same rows, answering
all the queries with one float32 matrix product."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ocrr.batch import Batch
from ocrr.ledger.sqlite.store import DurableLedger
from ocrr.systems.registry import make_system

ENTRIES, DIM, CLASSES, BLOCK = 100_000, 32, 200, 25_000


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _class_rows(rng: np.random.Generator, centres: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    classes = rng.integers(len(centres), size=n)
    return _unit(centres[classes] + rng.normal(0, 0.12, (n, centres.shape[1]))), classes


def test_the_service_answers_the_exact_vote_at_100k_entries(tmp_path):
    pytest.importorskip("fastapi")
    requests = pytest.importorskip("requests")
    from service_helpers import TOKEN, running

    from ocrr.service.app import create_app
    from ocrr.service.config import ServiceConfig
    from ocrr.service.state import build_state

    rng = np.random.default_rng(54)
    centres = _unit(rng.normal(size=(CLASSES, DIM)))
    vecs, classes = _class_rows(rng, centres, ENTRIES)
    labels = [f"c{c}" for c in classes.tolist()]
    path = tmp_path / "big.db"
    with DurableLedger.open(path, dim=DIM) as led:
        for lo in range(0, ENTRIES, BLOCK):
            led.extend(vecs[lo : lo + BLOCK], labels[lo : lo + BLOCK], [f"t{i}" for i in range(lo, lo + BLOCK)])
    queries, _ = _class_rows(rng, centres, 300)

    exact = make_system("substrate").fit(Batch(vecs, [f"t{i}" for i in range(ENTRIES)], labels))
    want = list(exact.predict(Batch(queries)))
    assert len(set(want)) > CLASSES // 2  # the queries span the classes

    state = build_state(ServiceConfig(ledger=path, token=TOKEN), log=lambda m: None)
    with running(create_app(state)) as url:

        def ask(rows: np.ndarray) -> list:
            with requests.Session() as s:
                return [s.post(f"{url}/predict", data=json.dumps({"vectors": [q.tolist()]})).json() for q in rows]

        with ThreadPoolExecutor(6) as pool:
            answers = [a for part in pool.map(ask, np.array_split(queries, 6)) for a in part]
        metrics = requests.get(f"{url}/metrics").text
    got = [a["predictions"][0]["label"] for a in answers]
    assert got == want
    counters = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if line.startswith("ocrr_")}
    assert counters["ocrr_predict_pooled_total"] == len(queries)  # every answer came through the pooled path
