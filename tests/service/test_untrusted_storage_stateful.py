"""A stateful property test of the service against storage an attacker can write.

Hypothesis interleaves corrections, reads of served bytes, checkpoints, graceful restarts,
SIGKILLs and storage tampering (an old entry edited, the tail removed, a row inserted past the
head, a bogus checkpoint row, the file rewound to an older copy, a second `ocrr serve` on the
same file by another name), against a real `ocrr serve` process on a real SQLite file. The
invariants are the ones a transparency log owes its users:

- no acknowledged correction is lost while storage is honest (across SIGKILLs too);
- never two different signed roots for one size (heads, checkpoints and /correct answers,
  across restarts);
- no byte that differs from what was acknowledged is served with 200;
- tampering that a request touches makes the service fail closed at that request (503),
  and a full /verify finds any tampering.

CI runs a few examples; the longer run is
``OCRR_STATEFUL_EXAMPLES=200 .venv/bin/python -m pytest tests/service/test_untrusted_storage_stateful.py``.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="the service extra is not installed (pip install -e '.[service]')")
requests = pytest.importorskip("requests")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402
from service_helpers import free_port  # noqa: E402

from ocrr.ledger.heads import Signer  # noqa: E402

DIM = 8
ORIGIN = "example.com/stateful"
LABELS = ("alpha", "beta", "gamma")
TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXAMPLES = int(os.environ.get("OCRR_STATEFUL_EXAMPLES", "10"))
START_TIMEOUT = 60.0


def unit_vector(n: int) -> list[float]:
    v = np.random.default_rng(n).normal(size=DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def backup(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite ledger (SQLite's backup API: WAL included)."""
    if dst.exists():
        dst.unlink()
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    b.close()
    a.close()


def sql(path: Path, statement: str, args: tuple = ()) -> None:
    conn = sqlite3.connect(path, timeout=30)
    try:
        conn.execute(statement, args)
        conn.commit()
    finally:
        conn.close()


class Service:
    """One `ocrr serve` process on a ledger file."""

    def __init__(self, ledger: Path, key: Path, port: int):
        self.ledger, self.key, self.port = ledger, key, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.refusal = ""

    def start(self) -> bool:
        """Start it; True once /health answers, False if it refused to start (exited; its
        message in ``refusal``). A port another process took meanwhile is not a refusal: it
        starts again on another port."""
        for _ in range(5):
            started = self._start_once()
            if started or not ("pick another --port" in self.refusal or "already in use" in self.refusal):
                return started
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
        return False

    def _start_once(self) -> bool:
        command = [sys.executable, "-m", "ocrr.cli", "serve", "--ledger", str(self.ledger)]
        command += [
            "--port",
            str(self.port),
            "--key",
            str(self.key),
            "--origin",
            ORIGIN,
            "--check-every",
            "0",
            "--verify-every",
            "0",
        ]
        self.proc = subprocess.Popen(
            command, env={**os.environ, "OCRR_TOKEN": TOKEN}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.refusal = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                self.proc = None
                return False
            try:
                requests.get(f"{self.url}/health", timeout=2)
                return True
            except requests.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("ocrr serve neither answered nor exited within a minute")

    def stop(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    @property
    def running(self) -> bool:
        return self.proc is not None


class UntrustedStorage(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ocrr-stateful-"))
        self.ledger, self.key = self.dir / "ledger.db", self.dir / "key.pem"
        Signer.generate(ORIGIN).save(self.key)
        self.service = Service(self.ledger, self.key, free_port())
        assert self.service.start(), f"ocrr serve refused to start on a new ledger: {self.service.refusal}"
        self.acked: list[tuple[str, str]] = []  # (label, text) of every acknowledged correction, by id
        self.signed: dict[int, str] = {}  # size -> root (base64) of every signed head or checkpoint seen
        self.undo: Callable[[], object] | None = None  # makes the storage honest again (service stopped)
        self.tamper: str | None = None  # the kind of tampering in force (None: storage is honest)
        self.edited: int | None = None  # the entry whose label was edited
        self.older: tuple[Path, int] | None = None  # an older copy of the file, and its size

    def teardown(self) -> None:
        self.service.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- what every answer is held to -------------------------------------------------------
    def saw_signed(self, size: int, root: str) -> None:
        earlier = self.signed.setdefault(size, root)
        assert earlier == root, f"two signed roots for size {size}: {earlier} and {root}"

    def saw_checkpoint(self, note: str) -> None:
        origin, size, root = note.split("\n")[:3]
        assert origin == ORIGIN
        self.saw_signed(int(size), root)

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(f"{self.service.url}{path}", timeout=30, **kw)

    # -- corrections and reads ----------------------------------------------------------------
    @precondition(lambda self: self.service.running)
    @rule(label=st.sampled_from(LABELS), n=st.integers(0, 10_000))
    def correct(self, label: str, n: int) -> None:
        text = f"item {n}"
        body = {"vectors": [unit_vector(n)], "labels": [label], "texts": [text]}
        r = requests.post(f"{self.service.url}/correct", json=body, headers=AUTH, timeout=30)
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if self.tamper in ("delete_tail", "insert_past_head"):
            assert r.status_code == 503, f"appended over storage whose tail was changed ({self.tamper})"
        if self.tamper is None:
            assert r.status_code == 200, f"honest storage, but /correct answered {r.status_code}: {r.text}"
        if r.status_code == 200:
            answer = r.json()
            assert answer["ids"] == [len(self.acked)], "ids must follow on from the acknowledged ones"
            self.acked.append((label, text))
            head = answer["head"]
            self.saw_signed(head["size"], head["root"])
            self.saw_checkpoint(head["checkpoint"])

    @precondition(lambda self: self.service.running and self.acked)
    @rule(data=st.data())
    def read_entry(self, data) -> None:
        i = data.draw(st.integers(0, len(self.acked) - 1))
        r = self.get(f"/proof/inclusion/{i}/entry", headers=AUTH)
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 200:
            entry = r.json()["entry"]
            assert (entry["label"], entry["text"]) == self.acked[i], (
                f"entry {i} served with 200 but not as acknowledged"
            )
        if self.tamper == "edit" and i == self.edited:
            assert r.status_code == 503, "an edited entry was served"

    @precondition(lambda self: self.service.running and self.acked)
    @rule()
    def read_bundle(self) -> None:
        width = min(len(self.acked), 256)
        r = self.get(f"/tile/entries/000.p/{width}" if width < 256 else "/tile/entries/000", headers=AUTH)
        assert r.status_code in (200, 404, 503), (r.status_code, r.text)
        if r.status_code == 200:
            body, at, i = r.content, 0, 0
            while at < len(body):
                length = int.from_bytes(body[at : at + 2], "big")
                raw = body[at + 2 : at + 2 + length]
                label, text = self.acked[i]
                assert label.encode() in raw and text.encode() in raw, f"bundle entry {i} is not as acknowledged"
                at, i = at + 2 + length, i + 1
            assert i == width
        if self.tamper in ("edit", "delete_tail") and r.status_code == 200:
            raise AssertionError(f"an entry bundle was served over {self.tamper}")

    @precondition(lambda self: self.service.running)
    @rule()
    def recent(self) -> None:
        r = self.get("/corrections/recent", headers=AUTH)
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 200:
            for c in r.json()["corrections"]:
                assert (c["label"], c["text"]) == self.acked[c["id"]], f"entry {c['id']} served with 200, edited"

    @precondition(lambda self: self.service.running)
    @rule()
    def checkpoint(self) -> None:
        r = self.get("/checkpoint")
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 200:
            self.saw_checkpoint(r.text)

    @precondition(lambda self: self.service.running)
    @rule()
    def head(self) -> None:
        r = self.get("/head")
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 200:
            self.saw_signed(r.json()["size"], r.json()["root"])

    @precondition(lambda self: self.service.running)
    @rule()
    def verify(self) -> None:
        r = self.get("/verify", headers=AUTH)
        assert r.status_code in (200, 503), (r.status_code, r.text)
        if r.status_code == 200:
            ok = r.json()["ok"]
            if self.tamper in (None, "bogus_checkpoint"):
                assert ok, f"honest storage (or an ignored bogus checkpoint row) reported damaged: {r.json()}"
            else:
                assert not ok, f"/verify missed tampering ({self.tamper})"
        if self.tamper not in (None, "bogus_checkpoint"):
            assert self.get("/health").status_code == 503, "damage found, but /health still says ok"

    # -- restarts ---------------------------------------------------------------------------
    @precondition(lambda self: self.service.running)
    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        self.service.stop(kill=kill)
        started = self.service.start()
        if self.tamper in (None, "bogus_checkpoint"):
            assert started, f"ocrr serve refused honest storage: {self.service.refusal}"
            h = self.get("/health", headers=AUTH).json()
            assert h["status"] == "ok" and h["entries"] == len(self.acked), f"acknowledged entries lost: {h}"

    # -- tampering (one kind at a time; the operator undoes it afterwards) ------------------------
    # Each tampering leaves ``self.undo``: what an operator who found it does to the storage (with
    # the service stopped) to make it honest again: every acknowledged entry, nothing else. (A
    # backup taken before the tampering would do only while nothing was acknowledged since.)
    @precondition(lambda self: self.service.running and self.tamper is None and self.acked)
    @rule(data=st.data())
    def tamper_edit(self, data) -> None:
        i = data.draw(st.integers(0, len(self.acked) - 1))
        sql(self.ledger, "UPDATE entries SET label = 'forged' WHERE id = ?", (i,))
        label = self.acked[i][0]
        self.undo = lambda: sql(self.ledger, "UPDATE entries SET label = ? WHERE id = ?", (label, i))
        self.tamper, self.edited = "edit", i

    @precondition(lambda self: self.service.running and self.tamper is None and len(self.acked) >= 2)
    @rule()
    def tamper_delete_tail(self) -> None:
        n = len(self.acked)
        conn = sqlite3.connect(self.ledger, timeout=30)
        try:
            row = conn.execute("SELECT * FROM entries WHERE id = ?", (n - 1,)).fetchone()
        finally:
            conn.close()
        sql(self.ledger, "DELETE FROM entries WHERE id = ?", (n - 1,))
        self.undo = lambda: sql(self.ledger, "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", row)
        self.tamper = "delete_tail"

    @precondition(lambda self: self.service.running and self.tamper is None and self.acked)
    @rule()
    def tamper_insert_past_head(self) -> None:
        n = len(self.acked)
        row = (n, "forged", "forged", bytes(4 * DIM), bytes(32), bytes(32))
        sql(self.ledger, "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", row)
        self.undo = lambda: sql(self.ledger, "DELETE FROM entries WHERE id = ?", (n,))
        self.tamper = "insert_past_head"

    @precondition(lambda self: self.service.running and self.tamper is None and self.acked)
    @rule()
    def tamper_bogus_checkpoint(self) -> None:
        n = len(self.acked)
        conn = sqlite3.connect(self.ledger, timeout=30)
        try:
            columns = [r[1] for r in conn.execute("PRAGMA table_info(checkpoints)")]
        finally:
            conn.close()
        values = [n, bytes(32), bytes(32), time.time()] + [None] * (len(columns) - 4)
        marks = ", ".join("?" * len(values))
        sql(self.ledger, f"INSERT OR REPLACE INTO checkpoints VALUES ({marks})", tuple(values))
        self.undo = lambda: sql(self.ledger, "DELETE FROM checkpoints WHERE size = ?", (n,))
        self.tamper = "bogus_checkpoint"

    @precondition(lambda self: self.service.running and self.tamper is None)
    @rule()
    def keep_older_copy(self) -> None:
        older = self.dir / "older.db"
        backup(self.ledger, older)
        self.older = (older, len(self.acked))

    @precondition(
        lambda self: (
            self.service.running
            and self.tamper is None
            and self.older is not None
            and self.older[1] < len(self.acked)
            and self.signed
            and max(self.signed) > self.older[1]
        )
    )
    @rule()
    def rewind_to_older_copy(self) -> None:
        """Storage rewound behind the operator's back to a copy older than a signed head: the
        restarted service must not sign anything that contradicts what it signed."""
        assert self.older is not None
        self.service.stop()
        honest = self.dir / "honest.db"
        backup(self.ledger, honest)  # SQLite's own copy: the file with its log folded in
        self.undo = lambda: _replace(self.ledger, honest)
        _replace(self.ledger, self.older[0])
        self.tamper = "rewind"
        if self.service.start():
            for path in ("/head", "/checkpoint"):
                r = self.get(path)
                if r.status_code == 200:
                    size, root = (r.json()["size"], r.json()["root"]) if path == "/head" else _checkpoint_fields(r.text)
                    self.saw_signed(size, root)
            body = {"vectors": [unit_vector(1)], "labels": ["alpha"], "texts": ["after the rewind"]}
            r = requests.post(f"{self.service.url}/correct", json=body, headers=AUTH, timeout=30)
            assert r.status_code != 200, "a correction was acknowledged on a rewound ledger (its id was signed before)"

    @precondition(lambda self: self.service.running and self.tamper is None)
    @rule()
    def second_name(self) -> None:
        """A second `ocrr serve` on the same file through a hard link must be refused."""
        link = self.dir / "other-name.db"
        os.link(self.ledger, link)
        try:
            other = Service(link, self.key, free_port())
            started = other.start()
            other.stop(kill=True)
            assert not started, "a second ocrr serve took the same ledger file through another name"
        finally:
            link.unlink()

    @precondition(lambda self: self.tamper is not None)
    @rule()
    def operator_restores(self) -> None:
        assert self.undo is not None
        self.service.stop()
        self.undo()
        self.tamper, self.edited, self.undo = None, None, None
        assert self.service.start(), f"ocrr serve refused the restored, honest copy: {self.service.refusal}"
        h = self.get("/health", headers=AUTH).json()
        assert h["status"] == "ok" and h["entries"] == len(self.acked), f"restored copy lost entries: {h}"

    @invariant()
    def signed_roots_are_one_history(self) -> None:
        # Every two signed sizes must belong to one history: the smaller root is a prefix of the
        # larger one's. Checked where the service still holds the entries.
        if not self.service.running or self.tamper is not None or len(self.signed) < 2:
            return
        for size, root in self.signed.items():
            if size > len(self.acked):
                continue
            r = self.get(f"/proof/consistency?from={size}&to={len(self.acked)}")
            if r.status_code == 200:
                assert r.json()["root_from"] == root, f"the service's history at size {size} is not the signed one"


def _replace(ledger: Path, copy: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, ledger)


def _checkpoint_fields(note: str) -> tuple[int, str]:
    _, size, root = note.split("\n")[:3]
    base64.b64decode(root, validate=True)
    return int(size), root


UntrustedStorage.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=EXAMPLES <= 10,  # CI: the same few examples every run; the long run explores
)
test_untrusted_storage = UntrustedStorage.TestCase
