"""The end-to-end story, real processes on loopback: two `ocrr witness`, one `ocrr serve --witness A
--witness B --quorum 1`, and a verifying `ocrr.client.Client` holding both witnesses' keys.

Honest operation keeps working with one witness down; a ledger forked (a second copy served
under the same key, with its own record of signed heads) or rewound from an old backup is
refused by the witnesses, which keep the log-signed evidence, the service never reaches its
quorum on it, and the client raises."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from tests.client.client_helpers import TOKEN, add_entries, free_port, unit_vectors  # noqa: E402

from ocrr.client import Client, ForkDetected, QuorumNotMet, RollbackDetected  # noqa: E402
from ocrr.ledger.cosignature import Cosigner, cosigned_by  # noqa: E402
from ocrr.ledger.heads import Signer, verify_checkpoint  # noqa: E402

ORIGIN = "example.com/witnessed"
DEADLINE = 30.0  # seconds a background step may take on a loaded box before the test fails


def _until(what: str, check, deadline: float = DEADLINE):
    """``check()``'s first truthy value; polls another process, which has no event to wait on."""
    end = time.monotonic() + deadline
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


class Witness:
    """An `ocrr witness serve` process with its own key and state, witnessing ORIGIN."""

    def __init__(self, folder: Path, name: str, log_vkey: str):
        folder.mkdir()
        self.folder, self.name, self.log_vkey = folder, name, log_vkey
        self.cosigner = Cosigner.generate(name)
        self.cosigner.save(folder / "key.pem")
        self.state = folder / "state.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    @property
    def vkey(self) -> str:
        return self.cosigner.vkey

    def start(self) -> Witness:
        cmd = [sys.executable, "-m", "ocrr.cli", "witness", "serve", "--state", str(self.state), "--name", self.name]
        cmd += ["--key", str(self.folder / "key.pem"), "--port", str(self.port), "--log", f"{ORIGIN}={self.log_vkey}"]
        cmd += [] if self.state.exists() else ["--new-state"]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "ocrr witness serve exited"
            try:
                return requests.get(self.url + "/", timeout=1).text.strip() == self.vkey
            except requests.ConnectionError:
                return False

        _until("the witness to start", up)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)

    def show(self) -> dict:
        cmd = [sys.executable, "-m", "ocrr.cli", "witness", "show", "--state", str(self.state)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def held_size(self) -> int | None:
        held = [log["size"] for log in self.show()["logs"] if log["origin"] == ORIGIN]
        return held[0] if held else None


class Service:
    """`ocrr serve --witness … --quorum 1` under one key and URL, on whichever ledger file."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.signer = Signer.generate(ORIGIN)
        self.signer.save(folder / "log.pem")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    @contextmanager
    def serving(self, ledger: Path, witnesses: list[Witness], stderr: Path, workers: int = 1):
        """Each ledger file with its own record of signed heads (and so its own witnessed head):
        a log whose operator keeps a record per copy, which only the witnesses can catch."""
        cmd = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(ledger), "--port", str(self.port)]
        cmd += ["--key", str(self.folder / "log.pem"), "--origin", ORIGIN, "--signed-state", f"{ledger}.signed"]
        for w in witnesses:
            cmd += ["--witness", f"{w.url}={w.vkey}"]
        cmd += ["--quorum", "1", "--check-every", "0", "--workers", str(workers)]
        with open(stderr, "a") as err:
            proc = subprocess.Popen(cmd, env={**os.environ, "OCRR_TOKEN": TOKEN}, stderr=err)

        def up() -> bool:
            assert proc.poll() is None, stderr.read_text()
            try:
                return requests.get(f"{self.url}/health", timeout=1).status_code == 200
            except requests.ConnectionError:
                return False

        try:
            _until("ocrr serve to start", up)
            yield self.url
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    def checkpoint(self) -> requests.Response:
        return requests.get(f"{self.url}/checkpoint", timeout=10)

    def witnessed_at(self, size: int, vkeys: list[str], count: int = 1) -> str:
        """The /checkpoint note once it is of ``size`` entries, cosigned by ``count`` of ``vkeys``."""

        def ready() -> str | None:
            r = self.checkpoint()
            if r.status_code != 200 or verify_checkpoint(r.text, self.signer.vkey)[1] != size:
                return None
            return r.text if len(cosigned_by(r.text, vkeys)) >= count else None

        return _until(f"a checkpoint of {size} entries cosigned by {count}", ready)

    def metric(self, name: str) -> float:
        text = requests.get(f"{self.url}/metrics", timeout=10).text
        (value,) = [line.split()[1] for line in text.splitlines() if line.startswith(name + " ")]
        return float(value)


@pytest.fixture
def world(tmp_path):
    service = Service(tmp_path)
    w1 = Witness(tmp_path / "w1", "witness.example/w1", service.signer.vkey).start()
    w2 = Witness(tmp_path / "w2", "witness.example/w2", service.signer.vkey).start()
    yield service, w1, w2
    w1.stop()
    w2.stop()


def _client(service: Service, witnesses: list[Witness], state: Path | None, wait: float = 10.0) -> Client:
    vkeys = [w.vkey for w in witnesses]
    return Client(service.url, service.signer.vkey, vkeys, quorum=1, state=state, token=TOKEN, witness_wait=wait)


def test_honest_operation_is_cosigned_and_survives_one_witness_down(world, tmp_path):
    service, w1, w2 = world
    both = [w1.vkey, w2.vkey]
    with service.serving(tmp_path / "ledger.db", [w1, w2], tmp_path / "serve.log"):
        with _client(service, [w1, w2], tmp_path / "head.json") as client:
            first = client.correct(unit_vectors(3, 1), ["a", "b", "a"], texts=["one", "two", "three"])
            assert first.ids == [0, 1, 2] and first.checkpoint.size == 3 and first.checkpoint.cosigners
            # Both witnesses cosign the head (the quorum of 1 is met first, the second line joins after).
            note = service.witnessed_at(3, both, count=2)
            assert set(cosigned_by(note, both)) == set(both)
            assert client.head().size == 3
            assert service.metric("ocrr_witnessed_size") == 3 and service.metric("ocrr_witness_lag_entries") == 0
            assert service.metric("ocrr_witness_requests_total") >= 2
            assert service.metric("ocrr_witness_refusals_total") == 0
            w2.stop()
            second = client.correct(unit_vectors(2, 2), ["b", "c"])
            assert second.checkpoint.size == 5
            assert [name for name, _ in second.checkpoint.cosigners] == ["witness.example/w1"]
            assert w1.held_size() == 5 and w2.held_size() == 3
            _until("the failed requests to the stopped witness", lambda: service.metric("ocrr_witness_failures_total"))
            assert service.metric("ocrr_witness_refusals_total") == 0


def test_without_a_quorum_checkpoint_is_503_and_head_still_signed(tmp_path):
    service = Service(tmp_path)
    down = Witness(tmp_path / "w1", "witness.example/w1", service.signer.vkey)  # never started
    with service.serving(tmp_path / "ledger.db", [down], tmp_path / "serve.log") as url:
        add_entries(url, 2, seed=1)
        r = service.checkpoint()
        assert r.status_code == 503
        detail = r.json()["detail"]
        assert "no checkpoint has been cosigned by 1 of the 1 witnesses yet" in detail and down.url in detail
        assert requests.get(f"{url}/head", timeout=10).json()["size"] == 2  # /head is signed by the log alone
        with _client(service, [down], None, wait=0.5) as client, pytest.raises(QuorumNotMet, match="no witnessed"):
            client.correct(unit_vectors(1, 2), ["a"])


def test_with_workers_one_process_witnesses_and_every_worker_serves_the_witnessed_head(world, tmp_path):
    service, w1, w2 = world
    with service.serving(tmp_path / "ledger.db", [w1, w2], tmp_path / "serve.log", workers=2) as url:
        workers = {}

        def both_workers_answer() -> bool:  # the service is up once one worker answers; the other may still open
            h = requests.get(f"{url}/health", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
            workers[h["worker"]] = h["pid"]  # a new connection each: the kernel spreads them over the workers
            return sorted(workers) == [0, 1]

        _until("both workers to answer", both_workers_answer)
        add_entries(url, 5, seed=1)
        note = service.witnessed_at(5, [w1.vkey, w2.vkey], count=2)
        answers = {
            requests.get(f"{url}/checkpoint", timeout=10, headers={"Connection": "close"}).text for _ in range(20)
        }
        assert answers == {note}  # whichever worker answered
        assert service.metric("ocrr_witnessed_size") == 5
        # One process sent the checkpoints (the counters are summed over the workers): each witness
        # was asked once per size (0 at the start, then 5), not once per worker.
        assert service.metric("ocrr_witness_requests_total") <= 4


def _grow_witnessed(service, witnesses, ledger, log, state, n, seed) -> int:
    """``n`` corrections through a client holding ``state``; the size they reach, cosigned."""
    with service.serving(ledger, witnesses, log), _client(service, witnesses, state) as client:
        return client.correct(unit_vectors(n, seed), ["x"] * n).checkpoint.size


def test_a_forked_copy_is_refused_by_the_witnesses_and_caught_by_the_client(world, tmp_path):
    service, w1, w2 = world
    a, b, log, state = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "serve.log", tmp_path / "head.json"
    assert _grow_witnessed(service, [w1, w2], a, log, state, 3, seed=1) == 3
    shutil.copy(a, b)  # stopped cleanly: the copy holds everything
    assert _grow_witnessed(service, [w1, w2], a, log, state, 2, seed=2) == 5
    _until("both witnesses to hold 5", lambda: w1.held_size() == 5 and w2.held_size() == 5)
    honest = verify_checkpoint(json.loads(state.read_text())["checkpoint"], service.signer.vkey)
    # The copy, served under the same key and URL with its own record, grows another history.
    with service.serving(b, [w1, w2], log) as url:
        add_entries(url, 4, seed=3, prefix="history B")
        for w in (w1, w2):  # each refused it (the proof from its 5 entries fails) and kept the evidence
            conflict = _until(f"{w.name}'s evidence", lambda w=w: w.show()["conflicts"])[0]
            assert verify_checkpoint(conflict["held"], service.signer.vkey) == honest
            assert verify_checkpoint(conflict["offered"], service.signer.vkey)[1] == 7
            assert w.held_size() == 5
        assert service.checkpoint().status_code == 503  # never reached its quorum
        assert service.metric("ocrr_witness_refusals_total") >= 2
        # The client holding the cosigned head of 5 sees the log-signed head of 8 fail to extend it.
        with _client(service, [w1, w2], state) as client, pytest.raises(ForkDetected, match="cannot prove"):
            client.correct(unit_vectors(1, 4), ["y"])
        # A client that never saw the honest log: nothing it is shown is cosigned.
        with _client(service, [w1, w2], None, wait=0.5) as fresh, pytest.raises(QuorumNotMet):
            fresh.correct(unit_vectors(1, 5), ["z"])
    assert "WITNESS REFUSED" in log.read_text() and "the log was forked" in log.read_text()


def test_a_ledger_rewound_from_an_old_backup_is_caught(world, tmp_path):
    service, w1, w2 = world
    ledger, log, state = tmp_path / "ledger.db", tmp_path / "serve.log", tmp_path / "head.json"
    backup = tmp_path / "backup"
    assert _grow_witnessed(service, [w1, w2], ledger, log, state, 3, seed=1) == 3
    backup.mkdir()
    for f in tmp_path.glob("ledger.db*"):  # the ledger, its record of signed heads and its witnessed head
        shutil.copy(f, backup / f.name)
    assert _grow_witnessed(service, [w1, w2], ledger, log, state, 2, seed=2) == 5
    for f in tmp_path.glob("ledger.db*"):
        f.unlink()
    for f in backup.iterdir():
        shutil.copy(f, tmp_path / f.name)
    with service.serving(ledger, [w1, w2], log):
        # /checkpoint stays at the old witnessed head: smaller than the one the client holds.
        assert verify_checkpoint(service.checkpoint().text, service.signer.vkey)[1] == 3
        with _client(service, [w1, w2], state) as client:
            with pytest.raises(RollbackDetected, match="3 entries, but it signed one of 5"):
                client.head()
            with pytest.raises(RollbackDetected, match="4 entries, but it signed one of 5"):
                client.correct(unit_vectors(1, 3), ["y"])  # committed, at 4: the witnesses hold 5
            assert client.held().size == 5
        _until("the witnesses' refusal", lambda: service.metric("ocrr_witness_refusals_total") >= 2)
        assert verify_checkpoint(service.checkpoint().text, service.signer.vkey)[1] == 3
    assert w1.held_size() == 5 and w2.held_size() == 5
    assert "the ledger was rewound" in log.read_text()
