"""`ocrr witness serve` as a real process on loopback: the c2sp.org/tlog-witness protocol, its
refusals, the evidence it keeps of a fork, and its state across restarts and SIGKILLs."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from ocrr.ledger.cosignature import Cosigner, attach_cosignatures, verify_cosignature  # noqa: E402
from ocrr.ledger.heads import Signer  # noqa: E402
from ocrr.ledger.merkle import MerkleTree  # noqa: E402
from ocrr.ledger.verify import leaf_hash, verify_consistency  # noqa: E402

SIZE_TYPE = "text/x.tlog.size"


class Log:
    """A log: a Merkle tree and the key that signs its checkpoints."""

    def __init__(self, signer: Signer, leaves: list[bytes] = ()):
        self.signer, self.tree = signer, MerkleTree()
        for leaf in leaves:
            self.tree.append(leaf)

    def grow(self, n: int, tag: str) -> Log:
        for i in range(n):
            self.tree.append(leaf_hash(f"{tag} {len(self.tree)} {i}".encode()))
        return self

    def fork(self, at: int) -> Log:
        """Another history under the same key: the first ``at`` entries, then others."""
        return Log(self.signer, [self.tree.node(0, i) for i in range(at)])

    def checkpoint(self, size: int) -> str:
        return self.signer.checkpoint(size, self.tree.root(size))

    def body(self, old: int, size: int, proof: list[bytes] | None = None) -> bytes:
        proof = self.tree.consistency_proof(old, size) if proof is None else proof
        lines = "".join(base64.b64encode(p).decode() + "\n" for p in proof)
        return f"old {old}\n{lines}\n{self.checkpoint(size)}".encode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Witness:
    """An `ocrr witness serve` process over a state file; start, kill and restart it."""

    def __init__(self, folder: Path, logs: list[Log]):
        self.folder, self.logs = folder, logs
        self.name = "witness.example/w1"
        self.key = folder / "witness.pem"
        self.cosigner = Cosigner.generate(self.name)
        self.cosigner.save(self.key)
        self.state = folder / "witness.db"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def command(self, new_state: bool, port: int) -> list[str]:
        cmd = [sys.executable, "-m", "ocrr.cli", "witness", "serve", "--state", str(self.state)]
        cmd += ["--key", str(self.key), "--name", self.name, "--port", str(port)]
        for log in self.logs:
            cmd += ["--log", f"{log.signer.origin}={log.signer.vkey}"]
        return cmd + (["--new-state"] if new_state else [])

    def start(self, new_state: bool = False) -> Witness:
        port = _free_port()
        self.proc = subprocess.Popen(self.command(new_state, port), stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                r = requests.get(self.url + "/", timeout=1)
                assert r.text.strip() == self.cosigner.vkey
                return self
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the witness did not start"
                time.sleep(0.05)

    def add(self, body: bytes) -> requests.Response:
        return requests.post(self.url + "/add-checkpoint", data=body, timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)
            self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc.stderr.close()

    def show(self) -> dict:
        cmd = [sys.executable, "-m", "ocrr.cli", "witness", "show", "--state", str(self.state)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _cosigned(log: Log, size: int, answer: requests.Response, witness: Witness) -> int:
    """Check the 200 answer is a cosignature of that checkpoint by the witness; its timestamp."""
    assert answer.status_code == 200, answer.text
    assert answer.text.startswith(f"\u2014 {witness.name} ") and answer.text.endswith("\n")
    return verify_cosignature(attach_cosignatures(log.checkpoint(size), answer.text), witness.cosigner.vkey)


@pytest.fixture(scope="module")
def logs():
    return {name: Log(Signer.generate(f"example.com/{name}")).grow(20, name) for name in ("a", "b", "c", "d", "e")}


@pytest.fixture(scope="module")
def witness(tmp_path_factory, logs):
    w = Witness(tmp_path_factory.mktemp("witness"), list(logs.values())).start(new_state=True)
    yield w
    w.stop()


def test_first_checkpoint_then_an_extension_are_cosigned(witness, logs):
    log = logs["a"]
    before = int(time.time())
    assert _cosigned(log, 5, witness.add(log.body(0, 5)), witness) >= before
    _cosigned(log, 9, witness.add(log.body(5, 9)), witness)
    _cosigned(log, 9, witness.add(log.body(9, 9)), witness)  # the same checkpoint again
    held = {h["origin"]: h for h in witness.show()["logs"]}[log.signer.origin]
    assert held["size"] == 9 and held["checkpoint"] == log.checkpoint(9)


def test_a_stale_old_size_gets_the_size_held(witness, logs):
    log = logs["b"]
    _cosigned(log, 7, witness.add(log.body(0, 7)), witness)
    r = witness.add(log.body(0, 12))  # a log that does not know the witness's size asks with old 0
    assert r.status_code == 409 and r.headers["content-type"] == SIZE_TYPE and r.text == "7\n"
    r = witness.add(log.body(3, 12))
    assert r.status_code == 409 and r.text == "7\n"
    _cosigned(log, 12, witness.add(log.body(7, 12)), witness)  # retried from the hint
    r = witness.add(log.body(12, 10, proof=[]))  # a smaller checkpoint than old: malformed
    assert r.status_code == 400 and "larger than the checkpoint's size" in r.text


def test_a_bad_proof_is_422_and_a_bad_signature_403_and_an_unknown_log_404(witness, logs):
    log = logs["c"]
    _cosigned(log, 4, witness.add(log.body(0, 4)), witness)
    proof = log.tree.consistency_proof(4, 10)
    proof[0] = bytes(32)
    r = witness.add(log.body(4, 10, proof=proof))
    assert r.status_code == 422 and "does not verify" in r.text
    r = witness.add(log.body(0, 10, proof=log.tree.consistency_proof(4, 10)))
    assert r.status_code == 409  # old 0 is not the size held
    impostor = Log(Signer.generate(log.signer.origin)).grow(10, "c")  # same origin, another key
    r = witness.add(impostor.body(4, 10))
    assert r.status_code == 403 and "not signed by the key this witness trusts" in r.text
    stranger = Log(Signer.generate("example.com/stranger")).grow(3, "s")
    r = witness.add(stranger.body(0, 3))
    assert r.status_code == 404 and "unknown log" in r.text
    for body in (b"old 01\n\n" + log.checkpoint(4).encode(), b"nonsense", b"old 4\nnot-base64\n\n" + b"x"):
        r = witness.add(body)
        assert r.status_code == 400, (body, r.text)
    too_long = log.body(4, 10, proof=[bytes(32)] * 64)
    r = witness.add(too_long)
    assert r.status_code == 400 and "more than the 63" in r.text
    r = witness.add(b"x" * (70 * 1024))
    assert r.status_code == 413
    # None of these moved the witness.
    held = {h["origin"]: h for h in witness.show()["logs"]}[log.signer.origin]
    assert held["size"] == 4
    assert not [c for c in witness.show()["conflicts"] if c["origin"] == "example.com/stranger"]


def test_a_fork_is_refused_and_its_evidence_kept(witness, logs):
    log = logs["d"]
    _cosigned(log, 10, witness.add(log.body(0, 10)), witness)
    fork = log.fork(6).grow(14, "other history")  # same key, same first 6 entries, then others
    r = witness.add(fork.body(10, 10))  # same size, another root
    assert r.status_code == 409 and r.headers["content-type"] == SIZE_TYPE and r.text == "10\n"
    r = witness.add(fork.body(10, 15))  # a larger fork, with the fork's own (valid for it) proof
    assert r.status_code == 422
    _cosigned(log, 20, witness.add(log.body(10, 20)), witness)  # the honest log goes on
    conflicts = [c for c in witness.show()["conflicts"] if c["origin"] == log.signer.origin]
    assert [(c["old_size"], c["offered"]) for c in conflicts] == [(10, fork.checkpoint(10)), (10, fork.checkpoint(15))]
    for c in conflicts:
        assert c["held"] == log.checkpoint(10)  # both sides signed by the log: proof of a split view
    assert "same size, another root" in conflicts[0]["reason"]
    assert conflicts[1]["proof"] == [base64.b64encode(p).decode() for p in fork.tree.consistency_proof(10, 15)]
    r = witness.add(fork.body(10, 10))  # the same evidence again is not stored twice
    assert r.status_code == 409
    assert len([c for c in witness.show()["conflicts"] if c["origin"] == log.signer.origin]) == 2


def test_state_survives_a_restart_and_is_written_by_one_process(tmp_path, logs):
    log = Log(Signer.generate("example.com/restarted")).grow(12, "r")
    w = Witness(tmp_path, [log]).start(new_state=True)
    try:
        _cosigned(log, 8, w.add(log.body(0, 8)), w)
        second = subprocess.run(w.command(False, _free_port()), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "in use by another `ocrr witness serve`" in second.stderr
        os.link(w.state, tmp_path / "same-file.db")  # another name for the same file: still one writer
        by_link = w.command(False, _free_port())
        by_link[by_link.index("--state") + 1] = str(tmp_path / "same-file.db")
        second = subprocess.run(by_link, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2 and "in use by another" in second.stderr
    finally:
        w.stop()
    w.start()
    try:
        r = w.add(log.body(0, 12))
        assert r.status_code == 409 and r.text == "8\n"
        _cosigned(log, 12, w.add(log.body(8, 12)), w)
    finally:
        w.stop()
    fresh = subprocess.run(w.command(True, _free_port()), capture_output=True, text=True, timeout=60)
    assert fresh.returncode == 2 and "already exists" in fresh.stderr
    w.state.rename(tmp_path / "moved.db")
    lost = subprocess.run(w.command(False, _free_port()), capture_output=True, text=True, timeout=60)
    assert lost.returncode == 2 and "must not start afresh" in lost.stderr and "Traceback" not in lost.stderr


def test_sigkill_mid_request_never_leaves_two_inconsistent_checkpoints_cosigned(tmp_path):
    """Writers race honest and forked checkpoints at the witness while it is SIGKILLed and
    restarted; every cosignature answered must be pairwise consistent with the others."""
    honest = Log(Signer.generate("example.com/killed")).grow(3000, "honest")
    fork = honest.fork(40).grow(2960, "fork")
    branches = (honest, fork)
    w = Witness(tmp_path, [honest]).start(new_state=True)
    answered: list[tuple[int, bytes]] = []  # (size, root) of each checkpoint cosigned
    stop = threading.Event()
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        guess = 0
        while not stop.is_set():
            log = branches[rng.random() < 0.3]  # the fork is cosignable until the witness is past entry 40
            target = min(guess + rng.randrange(0, 4), len(log.tree))
            try:
                r = requests.post(w.url + "/add-checkpoint", data=log.body(min(guess, target), target), timeout=5)
            except requests.RequestException:
                time.sleep(0.01)  # the witness is down: try again once it is back
                continue
            if r.status_code == 409 and r.headers.get("content-type") == SIZE_TYPE:
                guess = int(r.text)
            elif r.status_code == 200:
                verify_cosignature(attach_cosignatures(log.checkpoint(target), r.text), w.cosigner.vkey)
                with lock:
                    answered.append((target, log.tree.root(target)))
                guess = target

    with ThreadPoolExecutor(6) as pool:
        for seed in range(6):
            pool.submit(writer, seed)
        try:
            for _ in range(4):
                deadline = time.monotonic() + 0.5
                while time.monotonic() < deadline:
                    time.sleep(0.02)
                w.kill()  # SIGKILL, with requests in flight
                w.start()
            time.sleep(0.3)
        finally:
            stop.set()
    w.stop()
    assert len(answered) > 10
    sizes = sorted(set(answered))
    for i, (s1, r1) in enumerate(sizes):
        for s2, r2 in sizes[i + 1 :]:
            one_history = [log for log in branches if log.tree.root(s1) == r1 and log.tree.root(s2) == r2]
            assert one_history, f"cosigned {s1} and {s2} from two histories"
            verify_consistency(s1, s2, one_history[0].tree.consistency_proof(s1, s2), r1, r2)
    held = w.show()["logs"][0]
    assert (held["size"], base64.b64decode(held["root"])) == max(answered)
