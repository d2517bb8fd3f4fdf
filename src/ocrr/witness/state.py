"""What a witness remembers, and the checks of c2sp.org/tlog-witness made against it.

The state is one SQLite file (WAL, ``synchronous=FULL``: a commit is on disk when it returns)
holding, per log origin, the latest checkpoint the witness cosigned (the log-signed note
itself: its size and root are read from it, never stored twice), the witness's identity,
and the evidence of every conflict it refused. One process writes it: ``open`` takes an
exclusive lock on the file itself (its inode, whatever path or link names it), held until
``close``. Checking a request against the remembered checkpoint, recording the new one and
signing the cosignature happen under one lock and one transaction, and the cosignature is
made only after the commit: a kill at any point leaves either the old state and no
cosignature, or the new state, so two inconsistent checkpoints are never both cosigned.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ocrr.errors import OcrrError
from ocrr.ledger.cosignature import Cosigner, checkpoint_body
from ocrr.ledger.heads import verify_checkpoint
from ocrr.ledger.proofs import b64
from ocrr.ledger.verify import EMPTY_ROOT, ProofError, verify_consistency
from ocrr.witness.request import AddCheckpoint

__all__ = ["MAX_CONFLICTS", "Refused", "Held", "Conflict", "WitnessState", "read_state"]

MAX_CONFLICTS = 100  # evidence kept per log: the first ones prove the log misbehaved; a flood is not kept
SIZE_CONTENT_TYPE = "text/x.tlog.size"  # the 409 answer: the size last cosigned
_TEXT = "text/plain; charset=utf-8"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS witness (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cosigned (origin TEXT PRIMARY KEY, checkpoint TEXT NOT NULL, at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS conflicts (
    id INTEGER PRIMARY KEY,
    origin TEXT NOT NULL,
    at INTEGER NOT NULL,
    reason TEXT NOT NULL,
    held TEXT NOT NULL,
    offered TEXT NOT NULL,
    old_size INTEGER NOT NULL,
    proof TEXT NOT NULL,
    UNIQUE (origin, offered)
);
"""


class Refused(OcrrError):
    """A request the witness does not cosign, with the HTTP status the spec gives it."""

    def __init__(self, status: int, message: str, body: str | None = None, content_type: str = _TEXT):
        super().__init__(message)
        self.status, self.content_type = status, content_type
        self.body = message + "\n" if body is None else body


@dataclass(frozen=True)
class Held:
    """The latest checkpoint the witness cosigned for one log."""

    origin: str
    size: int
    root: bytes
    checkpoint: str


@dataclass(frozen=True)
class Conflict:
    """A log-signed checkpoint the witness refused because it disagrees with the one it held."""

    id: int
    origin: str
    at: int
    reason: str
    held: str  # the checkpoint the witness held then (log-signed)
    offered: str  # the one it refused (log-signed)
    old_size: int
    proof: list[str]  # the consistency proof sent with it, base64


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    else:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA busy_timeout=5000")
    return db


def _held(origin: str, checkpoint: str) -> Held:
    """The stored checkpoint, re-read as untrusted input: what does not parse fails closed."""
    try:
        _, stored_origin, size, root = checkpoint_body(checkpoint)
    except OcrrError as e:
        raise Refused(500, f"the witness state is damaged: its checkpoint for {origin} does not parse ({e})") from None
    if stored_origin != origin:
        raise Refused(500, f"the witness state is damaged: its checkpoint for {origin} is {stored_origin}'s")
    return Held(origin, size, root, checkpoint)


class WitnessState:
    """The witness's durable state, open for writing by this process alone."""

    def __init__(self, path: str | os.PathLike[str], cosigner: Cosigner, logs: dict[str, str], create: bool = False):
        self.path, self.cosigner, self.logs = Path(path).expanduser(), cosigner, dict(logs)
        if not create and not self.path.exists():
            raise OcrrError(
                f"witness state {self.path} does not exist. A witness that lost its state must not start afresh "
                "under the same key (it would cosign a history it refused before): pass --new-state the first time "
                "only, or point --state at the existing file"
            )
        if create and self.path.exists():
            raise OcrrError(f"witness state {self.path} already exists; drop --new-state to serve it")
        if not self.path.parent.is_dir():
            raise OcrrError(f"cannot create witness state {self.path}: directory {self.path.parent} does not exist")
        self._lock_fd = -1
        try:
            if not create:  # the one writer first, then a look at the file before anything writes to it
                self._lock_fd = _lock(self.path)
                self._check_is_a_state()
            self._db = _connect(self.path)
            if self._lock_fd < 0:
                self._lock_fd = _lock(self.path)
            if create:
                _fsync_dir(self.path.parent)
            self._db.executescript(_SCHEMA)
            self._check_identity()
        except (sqlite3.Error, OSError, UnicodeDecodeError) as e:  # (damaged schema bytes: an undecodable message)
            self.close()
            raise OcrrError(f"cannot open witness state {self.path} ({e}); is it a witness's --state file?") from None
        except BaseException:
            self.close()
            raise
        self._mutex = threading.Lock()  # requests of this process, one at a time

    def _check_is_a_state(self) -> None:
        """An existing ``--state`` must already be a witness's (its identity recorded), read
        before anything writes to it: an emptied file, another program's database or a ledger
        taken for one would start the witness afresh under its key, and be changed."""
        try:
            db = _connect(self.path, readonly=True)
            try:
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                identity = (
                    db.execute("SELECT value FROM witness WHERE key = 'vkey'").fetchone()
                    if "witness" in tables
                    else None
                )
            finally:
                db.close()
        except (sqlite3.Error, UnicodeDecodeError) as e:
            raise OcrrError(f"cannot open witness state {self.path} ({e}); is it a witness's --state file?") from None
        if identity is None:
            raise OcrrError(
                f"{self.path} is not a witness's state (it records no witness key); point --state at the file "
                "this witness created with --new-state. A witness that lost its state must not start afresh "
                "under the same key: make a new key and name for a new witness"
            )

    def _check_identity(self) -> None:
        rows = dict(self._db.execute("SELECT key, value FROM witness").fetchall())
        if not rows:
            self._db.execute("INSERT INTO witness VALUES ('vkey', ?)", (self.cosigner.vkey,))
        elif rows.get("vkey") != self.cosigner.vkey:
            raise OcrrError(
                f"witness state {self.path} belongs to the witness {rows.get('vkey')!r}, not to "
                f"{self.cosigner.vkey!r}: pass the --key and --name it was created with"
            )

    def close(self) -> None:
        if getattr(self, "_db", None) is not None:
            self._db.close()  # SQLite first: closing any descriptor of the file drops its POSIX locks
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def held(self, origin: str) -> Held | None:
        row = self._db.execute("SELECT checkpoint FROM cosigned WHERE origin = ?", (origin,)).fetchone()
        return None if row is None else _held(origin, row[0])

    def add_checkpoint(self, request: AddCheckpoint) -> str:
        """Check ``request`` as c2sp.org/tlog-witness says; if it passes, record its checkpoint
        durably and return the cosignature line. Otherwise raise Refused (with evidence of a
        conflict recorded first)."""
        try:
            _, origin, size, root = checkpoint_body(request.checkpoint)
        except OcrrError as e:
            raise Refused(400, str(e)) from None
        vkey = self.logs.get(origin)
        if vkey is None:
            raise Refused(404, f"unknown log {origin!r}: this witness does not witness it")
        try:
            verify_checkpoint(request.checkpoint, vkey)
        except OcrrError as e:
            raise Refused(403, f"not signed by the key this witness trusts for {origin}: {e}") from None
        if request.old > size:
            raise Refused(400, f"old size {request.old} is larger than the checkpoint's size {size}")
        with self._mutex:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    conflict = self._check_and_record(request, origin, size, root)
                    self._db.execute("COMMIT")  # on disk (WAL, synchronous=FULL) before anyone is answered
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:  # a full disk, an I/O error: fail closed, nothing cosigned
                raise Refused(503, f"the witness could not record the checkpoint ({e}); nothing was cosigned") from None
            if conflict is not None:  # its evidence is committed: now refuse
                raise conflict
            return self.cosigner.cosign(request.checkpoint)

    def _check_and_record(self, request: AddCheckpoint, origin: str, size: int, root: bytes) -> Refused | None:
        """Raise Refused for a request that is wrong; record the checkpoint and return None for a
        good one; record the evidence and return the refusal for one that conflicts."""
        held = self.held(origin)
        held_size, held_root = (0, EMPTY_ROOT) if held is None else (held.size, held.root)
        if request.old != held_size:
            raise Refused(
                409,
                f"old size {request.old} is not the size {held_size} last cosigned",
                body=f"{held_size}\n",
                content_type=SIZE_CONTENT_TYPE,
            )
        if held is not None and size == held_size:
            if root == held_root:
                return None  # the same checkpoint again: cosigned again, nothing to record
            return self._conflict(request, held, "same size, another root: the log shows two histories", 409)
        if request.old == 0 and request.proof:
            raise Refused(422, "a consistency proof from size 0 must be empty")
        try:
            verify_consistency(request.old, size, request.proof, held_root, root)
        except ProofError as e:
            if held is None:
                raise Refused(422, f"bad consistency proof: {e}") from None
            return self._conflict(request, held, f"the consistency proof does not verify: {e}", 422)
        self._db.execute(
            "INSERT INTO cosigned VALUES (?, ?, ?) "
            "ON CONFLICT (origin) DO UPDATE SET checkpoint = excluded.checkpoint, at = excluded.at",
            (origin, request.checkpoint, int(time.time())),
        )
        return None

    def _conflict(self, request: AddCheckpoint, held: Held, reason: str, status: int) -> Refused:
        """Record the two log-signed checkpoints that disagree (bounded per log); the refusal to answer."""
        count = self._db.execute("SELECT count(*) FROM conflicts WHERE origin = ?", (held.origin,)).fetchone()[0]
        if count < MAX_CONFLICTS:
            proof = json.dumps([b64(p) for p in request.proof])
            self._db.execute(
                "INSERT OR IGNORE INTO conflicts (origin, at, reason, held, offered, old_size, proof) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (held.origin, int(time.time()), reason, held.checkpoint, request.checkpoint, request.old, proof),
            )
        body = f"{held.size}\n" if status == 409 else None
        return Refused(
            status,
            f"refused, evidence kept: {reason} (held: size {held.size})",
            body=body,
            content_type=SIZE_CONTENT_TYPE if status == 409 else _TEXT,
        )


def _lock(path: Path) -> int:
    """An exclusive lock on the state file itself (its inode), or OcrrError naming the holder's kind."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OcrrError(
            f"witness state {path} is in use by another `ocrr witness serve`: stop that one first "
            "(one witness process writes one state)"
        ) from None
    return fd


def _fsync_dir(folder: Path) -> None:
    """Make a new file's name durable (its content is SQLite's to sync)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_state(path: str | os.PathLike[str]) -> dict:
    """The witness's identity, the checkpoints it holds and the conflicts it refused, read-only
    (a running witness keeps answering)."""
    path = Path(path).expanduser()
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise OcrrError(f"witness state {path} {what}; pass the --state file of `ocrr witness serve`")
    try:
        db = _connect(path, readonly=True)
        try:
            identity = dict(db.execute("SELECT key, value FROM witness").fetchall())
            logs = db.execute("SELECT origin, checkpoint, at FROM cosigned ORDER BY origin").fetchall()
            conflicts = db.execute(
                "SELECT id, origin, at, reason, held, offered, old_size, proof FROM conflicts ORDER BY id"
            ).fetchall()
        finally:
            db.close()
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise OcrrError(f"cannot read witness state {path} ({e}); pass the --state of `ocrr witness serve`") from e
    held = []
    for origin, checkpoint, at in logs:
        h = _held(origin, checkpoint)
        held.append({"origin": origin, "size": h.size, "root": b64(h.root), "at": at, "checkpoint": checkpoint})
    return {
        "witness": identity.get("vkey"),
        "logs": held,
        "conflicts": [
            asdict(Conflict(i, o, at, reason, h, off, old, json.loads(proof)))
            for i, o, at, reason, h, off, old, proof in conflicts
        ],
    }
