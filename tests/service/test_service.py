"""`ocrr serve`'s app over a real socket on 127.0.0.1: auth, bad input, proofs, metrics,
and a restart that keeps every acknowledged correction (schemathesis: test_openapi.py)."""

from __future__ import annotations

import base64
import json
import math
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import DIM, TOKEN, HashingEncoder, open_state, running, seed  # noqa: E402

from ocrr.ledger.heads import Signer, verify_checkpoint, verify_head  # noqa: E402
from ocrr.ledger.verify import verify_consistency, verify_inclusion  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402
from ocrr.service.limits import MAX_BATCH  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _b(s: str) -> bytes:
    return base64.b64decode(s)


@pytest.fixture(scope="module")
def signer():
    return Signer.generate("example.com/service-test")


@contextmanager
def _serving(folder, signer):
    """A signing server over a seeded ledger in ``folder``: (url, state, ledger path, key path)."""
    path, key = folder / "ledger.db", folder / "key.pem"
    signer.save(key)
    state = open_state(path, key=key, origin=signer.origin)
    seed(state)
    with running(create_app(state)) as url:
        yield url, state, path, key


@pytest.fixture(scope="module")
def server(tmp_path_factory, signer):
    """Shared by the tests that append nothing, so that each sees the seeded ledger in any order."""
    with _serving(tmp_path_factory.mktemp("svc"), signer) as served:
        yield served


@pytest.fixture
def own_server(tmp_path, signer):
    """A server of the test's own, for a test that appends corrections."""
    with _serving(tmp_path, signer) as served:
        yield served


def test_predict_by_text_and_vector(server):
    url, *_ = server
    r = requests.post(f"{url}/predict", json={"texts": ["my card has not arrived yet"]})
    assert r.status_code == 200
    (p,) = r.json()["predictions"]
    assert p["label"] == "card_arrival" and p["margin"] == 0.05
    assert {"id", "label", "similarity", "votes"} <= set(p["neighbours"][0])
    vec = HashingEncoder().encode(["what is my balance"])[0].tolist()
    r = requests.post(f"{url}/predict", json={"vectors": [vec, vec]})
    assert [p["label"] for p in r.json()["predictions"]] == ["balance", "balance"]


def test_vectors_as_base64_float32_answer_as_lists_do(own_server):
    """vectors_b64 (little-endian float32, base64) is the same query as the JSON list."""
    url, state, *_ = own_server
    vecs = HashingEncoder().encode(["what is my balance", "send money to a friend"])
    as_lists = requests.post(f"{url}/predict", json={"vectors": vecs.tolist()}).json()
    packed = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vecs]
    as_b64 = requests.post(f"{url}/predict", json={"vectors_b64": packed}).json()
    assert as_b64 == as_lists and [p["label"] for p in as_b64["predictions"]] == ["balance", "transfer"]
    r = requests.post(
        f"{url}/correct", json={"vectors_b64": packed[:1], "texts": ["b64 item"], "labels": ["packed"]}, headers=AUTH
    )
    assert r.status_code == 200, r.text
    (i,) = r.json()["ids"]
    assert state.substrate.ledger.read_entries(i, i + 1).__next__()[3] == vecs[0].astype("<f4").tobytes()


def test_correct_needs_the_token_and_returns_a_signed_head_and_proof(own_server, signer):
    url, state, *_ = own_server
    body = {"texts": ["lost my card in a taxi"], "labels": ["lost_card"]}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + TOKEN}):
        r = requests.post(f"{url}/correct", json=body, headers=headers)
        assert r.status_code in (401, 403) and "token" in r.json()["detail"]
    before = requests.get(f"{url}/head").json()
    r = requests.post(f"{url}/correct", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    out = r.json()
    (i,) = out["ids"]
    head = verify_head(out["head"], signer.vkey)
    assert head.size == i + 1 and out["head"]["signed"]
    assert verify_checkpoint(out["head"]["checkpoint"], signer.vkey)[1:] == (head.size, head.root)
    (proof,) = out["proofs"]
    verify_inclusion(i, head.size, _b(proof["leaf_hash"]), [_b(p) for p in proof["proof"]], head.root)
    # The corrected label is now predicted for the same text, and the log only grew.
    r = requests.post(f"{url}/predict", json={"texts": ["lost my card in a taxi"]})
    assert r.json()["predictions"][0]["label"] == "lost_card"
    cons = requests.get(f"{url}/proof/consistency", params={"from": before["size"]}).json()
    verify_consistency(
        before["size"], cons["to"], [_b(p) for p in cons["proof"]], _b(before["root"]), _b(cons["root_to"])
    )
    inc = requests.get(f"{url}/proof/inclusion/0").json()
    verify_inclusion(0, inc["size"], _b(inc["leaf_hash"]), [_b(p) for p in inc["proof"]], _b(inc["root"]))


def test_concurrent_corrections_each_get_a_signed_head_that_proves_them(own_server, signer):
    """Corrections that share a group commit share its signed head: each answer still
    verifies, covers its entry, and proves it."""
    from concurrent.futures import ThreadPoolExecutor

    url, *_ = own_server

    def correct(j):
        body = {"texts": [f"concurrent correction {j}"], "labels": ["balance"]}
        return requests.post(f"{url}/correct", json=body, headers=AUTH).json()

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(correct, range(40)))
    for out in answers:
        (i,) = out["ids"]
        head = verify_head(out["head"], signer.vkey)
        assert head.size > i and verify_checkpoint(out["head"]["checkpoint"], signer.vkey)[1:] == (head.size, head.root)
        (proof,) = out["proofs"]
        assert proof["size"] == head.size
        verify_inclusion(i, head.size, _b(proof["leaf_hash"]), [_b(p) for p in proof["proof"]], head.root)
    assert len({a["ids"][0] for a in answers}) == 40


def test_a_full_batch_of_corrections_is_one_append_with_a_proof_per_item(own_server, signer):
    """One /correct of MAX_BATCH items: all appended together (consecutive ids, one head), each
    answered with its ledger index and a proof equal to the one /proof/inclusion serves; a batch
    with one bad item appends none of them."""
    import numpy as np

    url, state, *_ = own_server
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((MAX_BATCH, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    body = {
        "vectors_b64": [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vecs],
        "labels": [f"label_{i % 5}" for i in range(MAX_BATCH)],
        "texts": [f"batched correction {i}" for i in range(MAX_BATCH)],
    }
    bad = {**body, "vectors_b64": [*body["vectors_b64"][:-1], base64.b64encode((2 * vecs[-1]).tobytes()).decode()]}
    n = len(state.substrate)
    r = requests.post(f"{url}/correct", json=bad, headers=AUTH)
    assert r.status_code == 400 and f"row {MAX_BATCH - 1}" in r.json()["detail"]
    assert len(state.substrate) == n  # all or nothing
    r = requests.post(f"{url}/correct", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["ids"] == list(range(n, n + MAX_BATCH))
    head = verify_head(out["head"], signer.vkey)
    assert head.size == n + MAX_BATCH and len(out["proofs"]) == MAX_BATCH
    for i, proof in zip(out["ids"], out["proofs"]):
        assert proof["index"] == i and proof["size"] == head.size
        nodes = [_b(p) for p in proof["proof"]]
        verify_inclusion(i, head.size, _b(proof["leaf_hash"]), nodes, head.root)
        assert nodes == state.substrate.ledger.inclusion_proof(i, head.size)  # made together = made alone
    served = requests.get(f"{url}/proof/inclusion/{n + 100}").json()
    assert served["proof"] == out["proofs"][100]["proof"] and served["size"] == head.size


BAD = [
    ({"vectors": [[float("nan")] + [0.0] * (DIM - 1)]}, "NaN"),
    ({"vectors": [[0.1] * (DIM - 1)]}, "dimension"),
    ({"vectors": [[0.1] * DIM, [0.1] * (DIM + 1)]}, "different lengths"),
    ({"texts": []}, "texts"),
    ({"texts": ["a"], "vectors": [[0.1] * DIM], "extra": 1}, "extra"),
    ({}, "texts"),
    ({"texts": "not a list"}, "texts"),
    ({"texts": ["x"] * (MAX_BATCH + 1)}, "texts"),
    ({"vectors_b64": ["not base64!"]}, "base64"),
    ({"vectors_b64": [base64.b64encode(b"\0" * 6).decode()]}, "float32"),
    (
        {"vectors_b64": [base64.b64encode(b"\0" * 4 * DIM).decode(), base64.b64encode(b"\0" * 8).decode()]},
        "same whole number",
    ),
    ({"vectors_b64": [base64.b64encode(b"\0" * 4 * (DIM + 1)).decode()]}, "dimension"),
    ({"vectors_b64": [base64.b64encode(b"\0\0\xc0\x7f" * DIM).decode()]}, "NaN"),
    ({"vectors": [[0.1] * DIM], "vectors_b64": [base64.b64encode(b"\0" * 4 * DIM).decode()]}, "not both"),
    # Texts beside vectors: one of the two would go unused (a prediction answered from the vectors).
    ({"texts": ["what is my balance"], "vectors": [[0.1] * DIM]}, "drop the texts to predict from the vectors"),
    ({"texts": ["a"], "vectors_b64": [base64.b64encode(b"\0\0\x80\x3f" * DIM).decode()]}, "not both"),
    # An all-zero query: every similarity 0, so any label would be answered from nothing
    # (pooled, and in a request big enough to be searched on its own).
    ({"vectors": [[0.0] * DIM]}, "row 0 has norm 0"),
    ({"vectors": [[0.1] * DIM] * 8 + [[0.0] * DIM]}, "row 8 has norm 0"),
    ({"vectors_b64": [base64.b64encode(b"\0" * 4 * DIM).decode()]}, "no label can be predicted from it"),
]


@pytest.mark.parametrize("body, word", BAD, ids=range(len(BAD)))
def test_bad_predict_input_gets_a_4xx_with_a_message(server, body, word):
    url, *_ = server
    data = json.dumps(body, allow_nan=True)  # NaN travels as the literal Python's json accepts
    r = requests.post(f"{url}/predict", data=data, headers={"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500 and word in r.json()["detail"], r.text


def test_the_shortcut_answers_as_fastapi_routing_does(server):
    """/predict and /correct skip FastAPI's routing (service/shortcut.py); the same app
    without the shortcut gives the same status, body and auth header for each request."""
    import dataclasses

    url, state, *_ = server
    routed = dataclasses.replace(state, close=lambda: None)  # same substrate; its shutdown leaves it open
    cases = [("POST", "/predict", json.dumps(body, allow_nan=True), {}) for body, _ in BAD]
    cases += [
        ("POST", "/predict", json.dumps({"texts": ["what is my balance", "send money"]}), {}),
        ("POST", "/predict", "{not json", {}),
        ("POST", "/predict", json.dumps({"vectors": [[0.1] * DIM]}) + " " * 3_000_000, {}),
        ("GET", "/predict", "", {}),
        ("POST", "/correct", json.dumps({"texts": ["a"], "labels": ["x"]}), {}),
        ("POST", "/correct", json.dumps({"texts": ["a"], "labels": ["x"]}), {"Authorization": "Bearer nope"}),
        ("POST", "/correct", json.dumps({"texts": ["a", "b"], "labels": ["x"]}), AUTH),
        ("POST", "/correct", json.dumps({"vectors": [[0.1] * (DIM + 1)], "labels": ["x"]}), AUTH),
    ]
    n = len(state.substrate)
    with running(create_app(routed, shortcut=False)) as plain_url:
        for method, path, data, headers in cases:
            answers = [
                requests.request(
                    method, base + path, data=data, headers={"Content-Type": "application/json", **headers}
                )
                for base in (url, plain_url)
            ]
            fast, plain = ((r.status_code, r.json(), r.headers.get("www-authenticate")) for r in answers)
            assert fast == plain, (method, path, data[:80])
    assert len(state.substrate) == n


def test_bad_correct_input_and_oversized_bodies(server):
    url, state, *_ = server
    n = len(state.substrate)
    r = requests.post(f"{url}/correct", json={"texts": ["a", "b"], "labels": ["x"]}, headers=AUTH)
    assert r.status_code == 400 and "one label per item" in r.json()["detail"]
    r = requests.post(f"{url}/correct", json={"texts": ["a"], "labels": [""]}, headers=AUTH)
    assert r.status_code == 422 and "labels" in r.json()["detail"]
    r = requests.post(
        f"{url}/predict", data=b"{" + b" " * 3_000_000 + b"}", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 413 and "bytes" in r.json()["detail"]
    r = requests.post(f"{url}/predict", data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert requests.get(f"{url}/proof/inclusion/99999").status_code == 404
    assert requests.get(f"{url}/proof/consistency", params={"from": 0}).status_code == 422
    assert len(state.substrate) == n  # nothing was appended


BAD_LABELS = [
    ("   ", "is blank"),
    ("broken_screen\n", "starts or ends with whitespace, which would make it a class apart from 'broken_screen'"),
    (" refund", "strip it"),
    ("refund\u00a0", "strip it"),  # a no-break space: whitespace to str.strip, invisible on screen
    ("card\tarrival", "holds the control character U+0009"),
    ("card\x7farrival", "U+007F"),
    ("a\x00b", "U+0000"),  # (was refused by the ledger; now at the door, with the others)
]


@pytest.mark.parametrize("label, words", BAD_LABELS, ids=range(len(BAD_LABELS)))
def test_a_label_that_would_be_a_class_apart_is_refused_before_it_is_stored(server, label, words):
    """Before: "   " and "broken_screen\n" were stored for good, and /predict then answered
    them as classes of their own beside "broken_screen"."""
    url, state, *_ = server
    n = len(state.substrate)
    unit = [1.0] + [0.0] * (DIM - 1)
    for body in (
        {"texts": ["my screen is cracked"], "labels": [label]},
        {"vectors": [unit], "labels": [label]},
        {"texts": ["a", "b"], "labels": ["balance", label]},
    ):
        r = requests.post(f"{url}/correct", json=body, headers=AUTH)
        detail = r.json()["detail"]
        assert r.status_code == 400 and words in detail and f"the label of item {len(body['labels']) - 1}" in detail
    assert len(state.substrate) == n  # nothing was appended


def test_labels_stored_before_the_rule_are_served_as_they_are(tmp_path):
    """The rule is for new labels: a ledger holding padded ones (from an older version) opens,
    and answers them as stored."""
    from ocrr.ledger import Ledger

    path = tmp_path / "old.db"
    texts = ["a padded one", "my card has not come", "what is my balance"]
    older = Ledger(DIM)  # the in-memory chain checks no label rule: as an older version stored them
    older.extend(HashingEncoder().encode(texts), ["balance ", "card", "balance"], texts)
    older.save(path)
    state = open_state(path)
    with running(create_app(state)) as url:
        r = requests.post(f"{url}/predict", json={"texts": ["a padded one"]})
        assert r.status_code == 200 and r.json()["predictions"][0]["neighbours"][0]["label"] == "balance "
        body = {"texts": ["interior spaces"], "labels": ["card  arrival"]}
        r = requests.post(f"{url}/correct", json=body, headers=AUTH)
        assert r.status_code == 200, r.text  # only the ends and control characters are refused


def test_verify_health_metrics_and_page(server):
    url, *_ = server
    v = requests.get(f"{url}/verify", headers=AUTH).json()
    assert v["ok"] and "intact" in v["reason"]
    assert requests.get(f"{url}/corrections/recent", headers=AUTH).json()["last_verify"] == v  # kept in the file
    assert requests.get(f"{url}/health").json()["status"] == "ok"
    unit = [1.0] + [0.0] * (DIM - 1)
    assert requests.post(f"{url}/predict", json={"vectors": [unit]}).status_code == 200  # a hot route
    text = requests.get(f"{url}/metrics").text
    assert "# TYPE ocrr_requests_total counter" in text and "ocrr_ledger_entries " in text
    assert 'ocrr_requests_total{path="/predict",status="200"}' in text  # timed by the shortcut too
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert math.isfinite(float(line.rsplit(" ", 1)[1]))
    # Prometheus's own parser reads it; the duration histogram is cumulative and ends at the count.
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    hist = families["ocrr_request_seconds"]
    assert hist.type == "histogram"
    by_path: dict = {}
    for sample in hist.samples:
        by_path.setdefault(sample.labels["path"], {}).setdefault(sample.name, []).append(sample)
    assert "/verify" in by_path and "/health" in by_path
    for samples in by_path.values():
        counts = [b.value for b in samples["ocrr_request_seconds_bucket"]]
        assert counts == sorted(counts) and samples["ocrr_request_seconds_bucket"][-1].labels["le"] == "+Inf"
        assert counts[-1] == samples["ocrr_request_seconds_count"][0].value >= 1
    page = requests.get(url + "/")
    assert page.status_code == 200 and "predict-btn" in page.text
    assert "/correct" in requests.get(f"{url}/openapi.json").json()["paths"]


def test_a_restart_keeps_every_acknowledged_correction(tmp_path):
    path = tmp_path / "l.db"
    state = open_state(path)
    seed(state)
    with running(create_app(state)) as url:
        ids = [
            requests.post(f"{url}/correct", json={"texts": [f"query {k}"], "labels": [f"l{k}"]}, headers=AUTH).json()[
                "ids"
            ][0]
            for k in range(5)
        ]
        head = requests.get(f"{url}/head").json()
    state = open_state(path)
    with running(create_app(state)) as url:
        again = requests.get(f"{url}/head").json()
        assert (again["size"], again["root"]) == (head["size"], head["root"]) and again["size"] == ids[-1] + 1
        r = requests.post(f"{url}/predict", json={"texts": ["query 3"]})
        assert r.json()["predictions"][0]["label"] == "l3"


# Schemathesis (every check, every phase, positive and negative data): tests/service/test_openapi.py.


def test_an_unknown_encoder_is_refused_with_the_fix():
    from ocrr.errors import OcrrError
    from ocrr.service.encoder import EncoderProcess

    with pytest.raises(OcrrError, match="unknown encoder .nonsense.. Use minilm, "):
        EncoderProcess("nonsense")


def test_the_encoder_process_yields_the_cpu_and_bad_priorities_name_the_fix():
    """By default the model runs in Linux's SCHED_IDLE class (only on a core nothing else
    wants); a niceness outside 0-19 is refused before any process starts."""
    import argparse
    import os

    from ocrr.cli.serve import _encoder_nice
    from ocrr.errors import OcrrError
    from ocrr.service.encoder import EncoderProcess

    assert _encoder_nice("idle") == "idle" and _encoder_nice("7") == 7
    for bad in ("20", "-1", "low"):
        with pytest.raises(argparse.ArgumentTypeError, match="0-19, or idle"):
            _encoder_nice(bad)
    with pytest.raises(OcrrError, match="0-19, or 'idle'"):
        EncoderProcess("minilm", nice=25)
    enc = EncoderProcess("minilm", nice="idle")
    try:
        if hasattr(os, "SCHED_IDLE"):
            assert os.sched_getscheduler(enc._proc.pid) == os.SCHED_IDLE
        assert enc.encode(["where is my card"]).shape == (1, 384)
        assert enc.dim == 384  # from its warm-up: what the service checks against the ledger's width
    finally:
        enc.close()


def test_ocrr_serve_starts_answers_and_shuts_down_cleanly(tmp_path):
    """The real command: `ocrr serve` in a child process; SIGTERM after corrections were
    acknowledged; it shuts down through its lifespan and the ledger holds every one."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from ocrr.ledger.sqlite.store import DurableLedger

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "served.db"
    env = {**os.environ, "OCRR_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(path), "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                requests.get(f"{url}/health", timeout=1)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "ocrr serve did not start"
                time.sleep(0.1)
        vecs = HashingEncoder().encode([f"item {k}" for k in range(6)]).tolist()
        ids = []
        for k in range(6):
            r = requests.post(f"{url}/correct", json={"vectors": [vecs[k]], "labels": [f"l{k % 2}"]}, headers=AUTH)
            assert r.status_code == 200, r.text
            ids += r.json()["ids"]
        r = requests.post(f"{url}/predict", json={"texts": ["x"]})
        assert r.status_code == 400 and "--encoder" in r.json()["detail"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # uvicorn re-raises the signal after its graceful shutdown
    assert "stopped: ledger" in proc.stderr.read() and ids == list(range(6))
    with DurableLedger.open(path) as led:
        assert len(led) == 6 and [e.label for e in led.memory] == [f"l{k % 2}" for k in range(6)]
