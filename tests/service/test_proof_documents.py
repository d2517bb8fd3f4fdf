"""The service and `ocrr ledger prove` / `consistency` hand out the same proof documents
(ocrr.ledger.proofs), and read them back as they were written."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from service_helpers import TOKEN, HashingEncoder, open_state, running, seed  # noqa: E402

from ocrr.cli.main import main  # noqa: E402
from ocrr.ledger.proofs import ConsistencyProof, InclusionProof  # noqa: E402
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


def test_both_inclusion_routes_refuse_an_entry_outside_the_log_alike(tmp_path):
    state = open_state(tmp_path / "ledger.db")
    seed(state)
    size = len(state.substrate)
    asks = [(size, None), (3, 3), (4, 3), (0, size + 1)]  # past the end, index == size, index > size, size too big
    with running(create_app(state)) as url:
        for index, at in asks:
            params = {} if at is None else {"size": at}
            bare = requests.get(f"{url}/proof/inclusion/{index}", params=params)
            with_entry = requests.get(f"{url}/proof/inclusion/{index}/entry", params=params, headers=AUTH)
            assert bare.status_code == with_entry.status_code == 404
            assert bare.json() == with_entry.json()
            assert "ask for 0 <= index < size <= the ledger's size" in bare.text
        ok = requests.get(f"{url}/proof/inclusion/2/entry", params={"size": 3}, headers=AUTH).json()
    assert ok["index"] == 2 and ok["size"] == 3


def test_a_batchs_correct_answer_holds_each_entrys_own_proof_document(tmp_path):
    """The proofs of a batched /correct (made together, encoded in one pass) are, entry by
    entry, the document ``InclusionProof.of`` makes alone, at the answer's size: batches that
    start and end at odd places of a tree whose size is no power of two."""
    state = open_state(tmp_path / "ledger.db")
    seed(state)
    texts = [f"a card lost in taxi number {i}" for i in range(150)]
    vectors = HashingEncoder().encode(texts).tolist()
    with running(create_app(state)) as url:
        for lo, hi in ((0, 1), (1, 38), (38, 150)):
            body = {"vectors": vectors[lo:hi], "texts": texts[lo:hi], "labels": ["lost_card"] * (hi - lo)}
            answer = requests.post(f"{url}/correct", json=body, headers=AUTH).json()
            size = answer["head"]["size"]
            tree = state.substrate.ledger.tree
            assert answer["ids"] == list(range(size - (hi - lo), size))
            assert answer["proofs"] == [InclusionProof.of(tree, i, size).to_dict() for i in answer["ids"]]
