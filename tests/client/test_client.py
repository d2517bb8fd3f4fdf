"""The verifying client against real `ocrr serve` processes on loopback: honest use, and each
lie a service (or the path to it) can tell caught by its own typed error."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import sqlite3
import threading

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from client_helpers import AUTH, TOKEN, Log, add_entries, free_port, proxy, unit_vectors  # noqa: E402
from tests.service.service_helpers import TOKEN as SERVICE_TOKEN  # noqa: E402
from tests.service.service_helpers import open_state, running  # noqa: E402

from ocrr.client import (  # noqa: E402
    AuditFailed,
    BadSignature,
    Client,
    EntryMismatch,
    ForkDetected,
    QuorumNotMet,
    RollbackDetected,
    ServiceUnavailable,
)
from ocrr.errors import OcrrError  # noqa: E402
from ocrr.ledger.cosignature import Cosigner  # noqa: E402
from ocrr.ledger.heads import Signer, verify_checkpoint  # noqa: E402
from ocrr.service.app import create_app  # noqa: E402


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path)


def test_honest_corrections_verify_and_the_head_is_kept_for_the_next_client(log, tmp_path):
    state = tmp_path / "state" / "head.json"
    with log.serving(tmp_path / "ledger.db") as url, Client(url, log.vkey, state=state, token=TOKEN) as client:
        first = client.correct(unit_vectors(3, 1), ["a", "b", "a"], texts=["one", "two", "three"])
        assert first.ids == [0, 1, 2] and first.checkpoint.size == 3
        second = client.correct(unit_vectors(2, 2), ["b", "c"])  # no texts: stored without
        assert second.ids == [3, 4] and second.checkpoint.size == 5
        kept = json.loads(state.read_text())
        assert kept["size"] == 5 and verify_checkpoint(kept["checkpoint"], log.vkey)[1] == 5
        predictions = client.predict(unit_vectors(2, 1))
        assert len(predictions) == 2 and predictions[0]["label"] == "a"
        add_entries(url, 4, seed=3)  # someone else's corrections: the log grows under this client
        # A new client on the same state file starts from the head the first one kept.
        with Client(url, log.vkey, state=state) as again:
            assert again.held().size == 5
            assert again.head().size == 9
        assert json.loads(state.read_text())["size"] == 9


def test_each_operation_holds_the_state_lock_from_fetch_to_save(log, tmp_path):
    """A client fetches a head and records it under one lock: another client on the same state
    file can never record a newer head in between (this one would then see its own, older head
    as a rollback) or have its newer head overwritten by an older one."""
    state = tmp_path / "head.json"
    lock = tmp_path / "head.json.lock"
    taken: list[tuple[str, bool]] = []

    def try_lock(method: str, path: str, body: bytes) -> bytes:
        if path in ("/checkpoint", "/correct"):
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken.append((path, True))
            except BlockingIOError:
                taken.append((path, False))
            finally:
                os.close(fd)
        return body

    with log.serving(tmp_path / "ledger.db") as url, proxy(url, answer=try_lock) as watched:
        with Client(watched, log.vkey, state=state, token=TOKEN) as client:
            client.head()
            client.correct(unit_vectors(1, 1), ["a"])
        assert taken == [("/checkpoint", False), ("/correct", False)]  # another client would have waited

        errors: list[Exception] = []

        def send(seed: int) -> None:
            try:
                with Client(url, log.vkey, state=state, token=TOKEN) as client:
                    for k in range(3):
                        client.correct(unit_vectors(1, 100 * seed + k), [f"l{seed}"])
            except Exception as e:  # noqa: BLE001 - reported below, in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=send, args=(s,)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert json.loads(state.read_text())["size"] == 10


def test_an_older_copy_of_the_ledger_is_a_rollback(log, tmp_path):
    ledger, backup, state = tmp_path / "ledger.db", tmp_path / "backup.db", tmp_path / "head.json"
    with log.serving(ledger) as url:
        add_entries(url, 3, seed=1)
    shutil.copy(ledger, backup)  # stopped cleanly: the file holds everything
    with log.serving(ledger) as url, Client(url, log.vkey, state=state, token=TOKEN) as client:
        client.correct(unit_vectors(3, 2), ["a", "b", "c"])
        assert client.held().size == 6
    with log.serving(backup) as url, Client(url, log.vkey, state=state) as client:
        with pytest.raises(RollbackDetected, match="rollback: .* 3 entries, but it signed one of 6") as caught:
            client.head()
        assert client.held().size == 6  # the state is not moved back
    assert verify_checkpoint(caught.value.held_note, log.vkey)[1] == 6
    assert verify_checkpoint(caught.value.seen_note, log.vkey)[1] == 3


def test_another_ledger_under_the_same_key_is_a_fork(log, tmp_path):
    state = tmp_path / "head.json"
    with log.serving(tmp_path / "a.db") as url:
        add_entries(url, 3, seed=1, prefix="history A")
        with Client(url, log.vkey, state=state) as client:
            held = client.head()
    with log.serving(tmp_path / "b.db") as url:  # the same URL, the same key, another history
        add_entries(url, 3, seed=2, prefix="history B")
        with Client(url, log.vkey, state=state) as client:
            with pytest.raises(ForkDetected, match="two different trees of 3 entries") as same_size:
                client.head()
            add_entries(url, 2, seed=3)
            with pytest.raises(ForkDetected, match="cannot prove that its checkpoint of 5 entries extends") as grown:
                client.head()
            assert client.held() == held
    for caught, seen in ((same_size, 3), (grown, 5)):
        assert caught.value.held_note == held.note
        assert verify_checkpoint(caught.value.seen_note, log.vkey)[1] == seen
        assert caught.value.evidence() == {"held_checkpoint": held.note, "seen_checkpoint": caught.value.seen_note}


def _relabel(method: str, path: str, body: bytes) -> bytes:
    """A correction's second label changed on its way to the service."""
    if path != "/correct":
        return body
    doc = json.loads(body)
    doc["labels"][1] = "something else"
    return json.dumps(doc).encode()


def _retext(method: str, path: str, body: bytes) -> bytes:
    """An entry proof whose entry claims another text."""
    if not path.endswith("/entry"):
        return body
    doc = json.loads(body)
    doc["entry"]["text"] = "not what was sent"
    return json.dumps(doc).encode()


def test_a_service_that_stored_something_else_is_caught(log, tmp_path):
    with log.serving(tmp_path / "ledger.db") as url:
        with proxy(url, request=_relabel) as lying, Client(lying, log.vkey, token=TOKEN) as client:
            with pytest.raises(EntryMismatch, match="entry 1: the log holds label 'something else'") as caught:
                client.correct(unit_vectors(2, 1), ["a", "b"], texts=["x", "y"])
            assert caught.value.index == 1 and caught.value.evidence()["sent"] == "b"
        with proxy(url, answer=_retext) as lying, Client(lying, log.vkey, token=TOKEN) as client:
            with pytest.raises(EntryMismatch, match="entry 2: the log holds text 'not what was sent'"):
                client.correct(unit_vectors(1, 2), ["a"], texts=["sent"])


def _forged_leaf(method: str, path: str, body: bytes) -> bytes:
    """An entry proof that tells the truth about the fields but hides that the service hashed
    other bytes: here the correction's label is changed before it reaches the service, and the
    entry reported back is made to match what the client sent."""
    if not path.endswith("/entry"):
        return body
    doc = json.loads(body)
    if doc["index"] == 1:
        doc["entry"]["label"] = "b"  # what the client sent, not what the service stored and hashed
    return json.dumps(doc).encode()


def test_an_entry_reported_as_sent_but_stored_otherwise_does_not_reach_the_signed_root(log, tmp_path):
    with log.serving(tmp_path / "ledger.db") as url:
        with proxy(url, request=_relabel, answer=_forged_leaf) as lying, Client(lying, log.vkey, token=TOKEN) as client:
            with pytest.raises(EntryMismatch, match="entry 1: the signed log holds other bytes than the correction"):
                client.correct(unit_vectors(2, 1), ["a", "b"])


def _flip_first_byte(method: str, path: str, body: bytes) -> bytes:
    return bytes([body[0] ^ 1]) + body[1:]


def test_the_audit_rebuilds_the_log_from_its_tiles_and_catches_an_altered_one(log, tmp_path):
    with log.serving(tmp_path / "ledger.db") as url:
        add_entries(url, 300, seed=1)  # a full tile of 256, a partial one, a level-1 tile
        with Client(url, log.vkey, token=TOKEN) as client:
            rehashed = client.audit()
            hashes_only = client.audit(entries=False)
        assert (rehashed.size, rehashed.entries_checked, rehashed.entries_rehashed) == (300, 300, 300)
        assert (hashes_only.entries_checked, hashes_only.entries_rehashed) == (300, 0)
        assert rehashed.tiles_checked == 5 and hashes_only.tiles_checked == 3  # + the 2 bundles, + level 0
        for path, entries in (("/tile/0/000", False), ("/tile/0/001.p/44", False), ("/tile/entries/000", True)):
            forge = lambda m, p, body, path=path: _flip_first_byte(m, p, body) if p == path else body  # noqa: E731
            with proxy(url, answer=forge) as lying, Client(lying, log.vkey, token=TOKEN) as client:
                with pytest.raises(AuditFailed, match="audit failed at the checkpoint of 300 entries") as caught:
                    client.audit(entries=entries)
            assert caught.value.tile == path.lstrip("/"), caught.value
        upper = lambda m, p, body: _flip_first_byte(m, p, body) if p == "/tile/1/000.p/1" else body  # noqa: E731
        with proxy(url, answer=upper) as lying, Client(lying, log.vkey) as client:
            with pytest.raises(AuditFailed, match="tile/1/000.p/1 is not the tile of the tree rebuilt"):
                client.audit()


def test_a_service_down_or_failed_closed_is_said_so(log, tmp_path):
    with Client(f"http://127.0.0.1:{free_port()}", log.vkey) as client:
        with pytest.raises(ServiceUnavailable, match="cannot reach the service .* nothing was verified"):
            client.head()
    ledger = tmp_path / "ledger.db"
    with log.serving(ledger) as url, Client(url, log.vkey, token=TOKEN) as client:
        add_entries(url, 3, seed=1)
        assert client.head().size == 3
        with sqlite3.connect(ledger) as conn:  # a row edited behind the service's back
            conn.execute("UPDATE entries SET label = 'edited' WHERE id = 1")
        assert requests.get(f"{url}/verify", headers=AUTH).json()["ok"] is False
        with pytest.raises(ServiceUnavailable, match="answers 503 to /checkpoint .* the service failed closed"):
            client.head()
        assert client.held().size == 3


def test_a_quorum_of_witnesses_is_required_when_configured(log, tmp_path):
    """The cosignature check is one call (ocrr.ledger.cosignature.check_quorum's shape); here a
    stand-in that finds no cosignature, and one that finds one."""
    witness_vkey = Cosigner.generate("witness.example").vkey
    seen: list[tuple] = []

    def none_cosigned(note, vkeys, quorum):
        seen.append((note, tuple(vkeys), quorum))
        raise OcrrError(f"0 of the {len(vkeys)} witnesses cosigned it")

    def cosigned(note, vkeys, quorum):
        return {vkeys[0]: 1_700_000_000}

    with log.serving(tmp_path / "ledger.db") as url:
        add_entries(url, 2, seed=1)
        strict = Client(url, log.vkey, [witness_vkey], 1, quorum_check=none_cosigned, token=TOKEN, witness_wait=0)
        with strict, pytest.raises(QuorumNotMet, match="0 of the 1 witnesses cosigned it; 1 of 1 needed"):
            strict.head()
        assert seen[0][1:] == ((witness_vkey,), 1) and verify_checkpoint(seen[0][0], log.vkey)[1] == 2
        with Client(url, log.vkey, [witness_vkey], 1, quorum_check=cosigned, token=TOKEN) as client:
            assert client.head().cosigners == (("witness.example", 1_700_000_000),)
            done = client.correct(unit_vectors(1, 5), ["a"])
            assert done.checkpoint.size == 3 and done.checkpoint.cosigners


def test_a_state_file_of_another_log_is_refused(log, tmp_path):
    state = tmp_path / "head.json"
    other = Signer.generate("example.com/other")
    state.write_text(
        json.dumps(
            {
                "version": 1,
                "origin": other.origin,
                "size": 0,
                "root": base64.b64encode(bytes(32)).decode(),
                "checkpoint": other.checkpoint(0, bytes(32)),
            }
        )
    )
    with Client(log.url, log.vkey, state=state) as client, pytest.raises(OcrrError, match="use one state file per log"):
        client.held()


def test_texts_the_service_encodes_are_checked_by_label_and_text(tmp_path):
    """Texts alone: the service's encoder makes the vector, so the client checks the label and
    text it sent (and the proofs), taking the vector from the service."""
    signer = Signer.generate("example.com/client-texts")
    signer.save(tmp_path / "key.pem")
    state = open_state(tmp_path / "ledger.db", key=tmp_path / "key.pem", origin=signer.origin)
    with running(create_app(state)) as url:
        with Client(url, signer.vkey, token=SERVICE_TOKEN) as client:
            done = client.correct(["my card has not arrived", "what is my balance"], ["card_arrival", "balance"])
            assert done.ids == [0, 1] and done.checkpoint.size == 2
        with proxy(url, request=_relabel) as lying, Client(lying, signer.vkey, token=SERVICE_TOKEN) as client:
            with pytest.raises(EntryMismatch, match="entry 3: the log holds label 'something else'"):
                client.correct(["send money", "show my balance"], ["transfer", "balance"])


def test_a_checkpoint_altered_on_the_way_is_refused_and_not_kept(log, tmp_path):
    state = tmp_path / "head.json"

    def other_root(method: str, path: str, body: bytes) -> bytes:
        if path != "/checkpoint":
            return body
        origin, size, root, rest = body.split(b"\n", 3)
        return b"\n".join((origin, size, base64.b64encode(bytes(32)), rest))

    with log.serving(tmp_path / "ledger.db") as url:
        add_entries(url, 2, seed=1)
        with proxy(url, answer=other_root) as lying, Client(lying, log.vkey, state=state) as client:
            with pytest.raises(BadSignature, match="does not verify with the log's key") as caught:
                client.head()
            assert client.held() is None and not state.exists()
        assert caught.value.evidence()["note"].split("\n")[2] == base64.b64encode(bytes(32)).decode()
