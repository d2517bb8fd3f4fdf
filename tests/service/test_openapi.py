"""The OpenAPI schema documents every status each route answers, with one error shape,
and schemathesis (all its checks, every phase, positive and negative data) finds neither
a server error nor a conformance issue."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, open_state, running, seed  # noqa: E402

from ocrr.ledger.heads import Signer  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ERROR = {"$ref": "#/components/schemas/ErrorOut"}
CHECKS = {
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A signing server over a seeded ledger: (url, its OpenAPI schema)."""
    folder = tmp_path_factory.mktemp("openapi")
    signer = Signer.generate("example.com/openapi-test")
    signer.save(folder / "key.pem")
    state = open_state(folder / "ledger.db", key=folder / "key.pem", origin=signer.origin)
    seed(state)
    with running(create_app(state)) as url:
        yield url, requests.get(f"{url}/openapi.json").json()


def _documented(schema: dict, path: str, method: str = "get") -> dict:
    return schema["paths"][path][method]["responses"]


def test_every_status_a_route_answers_is_documented_with_the_one_error_shape(served):
    """Before: only 200 (and FastAPI's 422 with a list ``detail`` the service never sends)."""
    url, schema = served
    bodies = {
        ("post", "/predict", None): [400, 413, 422],
        ("post", "/correct", None): [400, 401, 413, 422],
        ("get", "/proof/inclusion/{index}", None): [404, 413, 422],
        ("get", "/proof/consistency", None): [404, 413, 422],
        ("get", "/verify", None): [401, 413],
        ("get", "/corrections/recent", None): [401, 413],
        ("get", "/head", None): [413, 503],
        ("get", "/metrics", None): [413],
    }
    for (method, path, _), statuses in bodies.items():
        responses = _documented(schema, path, method)
        assert "200" in responses, path
        for status in statuses:
            content = responses[str(status)]["content"]["application/json"]["schema"]
            assert content == ERROR, (path, status)
    error = schema["components"]["schemas"]["ErrorOut"]
    assert error["properties"]["detail"]["type"] == "string" and error["required"] == ["detail"]
    assert "WWW-Authenticate" in _documented(schema, "/correct", "post")["401"]["headers"]
    assert "503" in _documented(schema, "/health")
    # What the service answers has that shape: a 422 from a query, from a body, a 401, a 404, a 413.
    answers = [
        requests.get(f"{url}/proof/consistency", params={"from": 0}),
        requests.post(f"{url}/predict", data=b"{not json", headers={"Content-Type": "application/json"}),
        requests.get(f"{url}/verify"),
        requests.get(f"{url}/proof/inclusion/99999"),
        requests.post(f"{url}/predict", data=b"{" + b" " * 3_000_000 + b"}"),
    ]
    assert [r.status_code for r in answers] == [422, 422, 401, 404, 413]
    for r in answers:
        assert list(r.json()) == ["detail"] and isinstance(r.json()["detail"], str), r.text


def test_schemathesis_finds_no_server_error_and_no_conformance_issue(served):
    """All of schemathesis's checks, in every phase (examples, coverage, fuzzing), with
    positive and negative data, with the token: no failure. A schema cannot say that a
    vector has the ledger's dimension or that labels and items pair up, so a schema-valid
    request may get the documented 400 naming the fix; positive data must still never get
    a 422 (the schema is no stricter than the service's validation)."""
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.engine import Status, events, from_schema

    url, _ = served
    config = schemathesis.Config.from_dict(
        {
            "seed": 1,
            "headers": AUTH,
            "checks": {
                "enabled": True,
                "positive_data_acceptance": {
                    "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "429", "503"]
                },
            },
            "generation": {"mode": "all", "max-examples": 30, "deterministic": True, "database": "none"},
        }
    )
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)
    failures, errors, ran, tested = [], [], set(), 0
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            tested += 1
            for nodes in event.recorder.checks.values():
                for node in nodes:
                    ran.add(node.name)
                    if node.status == Status.FAILURE and node.failure_info is not None:
                        failure = node.failure_info.failure
                        failures.append(f"{failure.operation}: {failure.title}: {failure.message[:200]}")
        elif isinstance(event, events.NonFatalError | events.FatalError):
            errors.append(event)
    assert not errors, errors
    assert tested >= 9  # every operation ran
    assert CHECKS <= ran, CHECKS - ran
    assert not failures, "\n".join(sorted(set(failures)))


def test_the_text_routes_document_their_errors_as_json(served):
    """/checkpoint and /verifier-key answer text/plain, but their errors (404 without a signing
    key, 503 once damaged) are JSON: documented as such, or `st run` reports ST105."""
    _, schema = served
    for path, statuses in (("/checkpoint", (404, 503)), ("/verifier-key", (404,)), ("/tile/{level}/{index}", (404,))):
        responses = _documented(schema, path)
        assert "text/plain" in responses["200"]["content"] or path.startswith("/tile")
        for status in statuses:
            assert responses[str(status)]["content"] == {"application/json": {"schema": ERROR}}, (path, status)
