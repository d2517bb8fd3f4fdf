"""The service writes strict JSON (RFC 8259): never ``Infinity`` or ``NaN``, which strict
parsers refuse. A similarity is the only float an answer computes: a query whose norm would
overflow it is refused with a 400 naming the fix (stored rows are unit vectors: the row rules
of ``ocrr.ledger.rows``), and the writer itself refuses a non-finite float."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import DIM, TOKEN, open_state, running, seed  # noqa: E402

from ocrr.service.app import create_app  # noqa: E402
from ocrr.systems.substrate.persistent import POOLED_BELOW  # noqa: E402


def _no_constant(name: str):
    raise AssertionError(f"the service wrote {name}, which is not JSON")


def strict(text: str):
    return json.loads(text, parse_constant=_no_constant)


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    state = open_state(tmp_path_factory.mktemp("strict") / "ledger.db")
    seed(state)
    with running(create_app(state)) as served:
        yield served


def _huge(n: int) -> np.ndarray:
    """Finite float32 queries whose dot product with any unit row overflows float32."""
    q = np.zeros((n, DIM), np.float32)
    q[:, :8] = 3e38
    return q


@pytest.mark.parametrize("n", [1, POOLED_BELOW], ids=["pooled", "alone"])
@pytest.mark.parametrize("form", ["vectors", "vectors_b64"])
def test_a_query_whose_similarities_overflow_is_refused_in_strict_json(url, n, form):
    queries = _huge(n)
    body = (
        {"vectors": queries.tolist()}
        if form == "vectors"
        else {"vectors_b64": [base64.b64encode(q.astype("<f4").tobytes()).decode() for q in queries]}
    )
    r = requests.post(f"{url}/predict", json=body)
    answer = strict(r.text)
    assert r.status_code == 400, answer
    assert "query vectors row 0 has norm" in answer["detail"] and "unit vectors" in answer["detail"]


def test_ordinary_answers_are_strict_json(url):
    q = np.random.default_rng(0).normal(size=(3, DIM)).astype(np.float32)
    r = requests.post(f"{url}/predict", json={"vectors": (q * 1e6).tolist()})  # not unit: allowed, finite
    assert r.status_code == 200
    for p in strict(r.text)["predictions"]:
        assert all(math.isfinite(n["similarity"]) for n in p["neighbours"])


def test_the_writer_refuses_a_non_finite_float():
    from ocrr.service.schemas import to_json

    assert to_json({"label": None, "similarity": 0.5}) == b'{"label":null,"similarity":0.5}'
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="non-finite"):
            to_json({"predictions": [{"label": "a", "neighbours": [{"similarity": bad}]}]})


def _floats_in(value) -> list:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    return [f for v in value for f in _floats_in(v)] if isinstance(value, list) else []


def test_a_correction_answer_holds_no_float_and_is_written_as_the_checked_writer_would(url):
    """/correct's answer skips the writer's search for a hidden non-finite float (``floats=False``):
    it holds none to hide, and its bytes are the checked writer's."""
    from ocrr.service.schemas import to_json

    rng = np.random.default_rng(1)
    q = rng.normal(size=(5, DIM)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    body = {"vectors": q.tolist(), "labels": ["a"] * 5}
    r = requests.post(f"{url}/correct", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text
    answer = strict(r.text)
    assert _floats_in(answer) == [] and len(answer["proofs"]) == 5
    assert r.content == to_json(answer)
