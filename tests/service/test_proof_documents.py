"""The service and `ocrr ledger prove` / `consistency` hand out the same proof documents, and
ocrr.ledger.proofs reads back what it writes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install 'ocrr[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, HashingEncoder, open_state, running, seed  # noqa: E402

from ocrr.cli.main import main  # noqa: E402
from ocrr.ledger.proofs import ConsistencyProof, InclusionProof, b64, unb64  # noqa: E402
from ocrr.ledger.verify import ProofError  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _cli(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_the_cli_and_the_service_hand_out_the_same_proof_documents(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    state = open_state(path)
    seed(state)
    text = "lost my card in a taxi"
    vector = HashingEncoder().encode([text])[0].tolist()
    with running(create_app(state)) as url:
        correct = requests.post(
            f"{url}/correct", json={"vectors": [vector], "texts": [text], "labels": ["lost_card"]}, headers=AUTH
        ).json()
        size = len(state.substrate)
        (i,) = correct["ids"]
        served = {
            "inclusion": requests.get(f"{url}/proof/inclusion/3").json(),
            "inclusion at 5": requests.get(f"{url}/proof/inclusion/3", params={"size": 5}).json(),
            "with entry": requests.get(f"{url}/proof/inclusion/3/entry", headers=AUTH).json(),
            "consistency": requests.get(f"{url}/proof/consistency", params={"from": 2}).json(),
            "consistency 2 to 5": requests.get(f"{url}/proof/consistency", params={"from": 2, "to": 5}).json(),
        }
    printed = _cli(capsys, "ledger", "prove", str(path), "--entry", "3")
    entry = printed.pop("entry")
    assert printed == served["inclusion"]
    assert served["inclusion"]["size"] == size and len(served["inclusion"]["proof"]) > 1
    assert {k: v for k, v in entry.items() if k != "hash"} == {
        k: v for k, v in served["with entry"].pop("entry").items() if k != "bytes"
    }
    assert served["with entry"] == printed
    assert {**_cli(capsys, "ledger", "prove", str(path), "--entry", "3", "--size", "5"), "entry": None} == {
        **served["inclusion at 5"],
        "entry": None,
    }
    assert {**_cli(capsys, "ledger", "prove", str(path), "--entry", str(i)), "entry": None} == {
        **correct["proofs"][0],
        "entry": None,
    }  # the /correct answer's proof too
    assert _cli(capsys, "ledger", "consistency", str(path), "--from", "2") == served["consistency"]
    assert _cli(capsys, "ledger", "consistency", str(path), "--from", "2", "--to", "5") == served["consistency 2 to 5"]
    for doc in (served["inclusion"], correct["proofs"][0]):
        assert InclusionProof.from_dict(doc).to_dict() == doc
    assert ConsistencyProof.from_dict(served["consistency"]).to_dict() == served["consistency"]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"root": None}, "'root' must be a JSON string"),
        ({"leaf_hash": "AAB="}, "canonical"),  # its unused bits are not zero: another spelling of "AAA="
        ({"proof": "AAAA"}, "'proof' must be a JSON array"),
        ({"index": True}, "'index' must be a JSON integer"),
        ({"size": -1}, "size must be a non-negative integer"),
    ],
)
def test_a_malformed_inclusion_document_is_refused_naming_its_field(change, complaint):
    doc = InclusionProof(1, 3, b"\1" * 32, b"\2" * 32, [b"\3" * 32, b"\4" * 32]).to_dict()
    doc.update(change)
    with pytest.raises(ProofError, match=complaint):
        InclusionProof.from_dict(doc)


def test_base64_has_one_spelling_for_each_value():
    assert unb64(b64(b"\0\1\2\3")) == b"\0\1\2\3"
    for spelling in ("AAE", "AAF=", "AA E=", "AAE=\n", "ÀAE=", 7):  # unpadded, stray bits, space, newline, non-ASCII
        with pytest.raises(ProofError):
            unb64(spelling)
