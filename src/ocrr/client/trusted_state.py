"""The last checkpoint a client verified, kept on disk so that the next client holds the log to it.

The file is JSON ``{"version": 1, "origin": ..., "size": ..., "root": ..., "checkpoint": <signed
note>}``, replaced atomically (a temporary file in the same folder, fsynced, renamed over it,
then the folder fsynced): a crash leaves the old head or the new one, never half of either.
Clients sharing one file take turns: ``locked()`` holds an exclusive ``flock`` on
``<file>.lock`` for a whole operation (read the head, check the service against it, write
the new one), so no client ever writes over a newer head with an older one.

On every read the note is verified again with the log's key: a file edited by hand, or
holding another log's head, is refused rather than trusted.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ocrr.client.checkpoints import Checkpoint, CheckpointVerifier
from ocrr.client.errors import ClientError
from ocrr.errors import OcrrError
from ocrr.ledger.proofs import b64

__all__ = ["TrustedState", "MemoryState"]

_VERSION = 1


class MemoryState:
    """The trusted head held in memory only (``state=None``): lost when the process ends."""

    def __init__(self) -> None:
        self._held: Checkpoint | None = None

    @contextmanager
    def locked(self) -> Iterator[MemoryState]:
        yield self

    def load(self) -> Checkpoint | None:
        return self._held

    def save(self, checkpoint: Checkpoint) -> None:
        self._held = checkpoint


class TrustedState:
    """The trusted head persisted at ``path`` for the log ``verifier`` checks."""

    def __init__(self, path: str | os.PathLike[str], verifier: CheckpointVerifier):
        self.path = Path(path).expanduser()
        self.verifier = verifier
        self._lock_path = self.path.with_name(self.path.name + ".lock")

    @contextmanager
    def locked(self) -> Iterator[TrustedState]:
        """Hold the state's lock (other clients on the same file wait) for one operation."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise OcrrError(
                f"cannot open the client state's lock {self._lock_path} ({e}); pass a writable --state"
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self
        finally:
            os.close(fd)  # closing releases the lock

    def load(self) -> Checkpoint | None:
        """The head held, verified again; None when the file does not exist yet (first use)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise OcrrError(f"cannot read the client state {self.path} ({e})") from e
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("version") != _VERSION:
                raise ValueError(f"not a version {_VERSION} client state")
            note = doc["checkpoint"]
            if not isinstance(note, str):
                raise ValueError("no checkpoint note")
        except (ValueError, KeyError) as e:
            raise OcrrError(
                f"the client state {self.path} is not one ocrr wrote ({e}): restore it from a backup, or move it "
                "away to start trusting the log afresh (losing what it held the log to)"
            ) from None
        if doc.get("origin") != self.verifier.origin:
            raise OcrrError(
                f"the client state {self.path} holds the head of log {doc.get('origin')!r}, not of "
                f"{self.verifier.origin!r} (the verifier key's log): use one state file per log"
            )
        try:  # the log's signature only: the witnesses vouched for it when it was saved
            checkpoint = self.verifier.verify(note, witnessed=False)
        except ClientError as e:
            raise OcrrError(
                f"the checkpoint in the client state {self.path} does not verify with the log's key ({e}): "
                "the file was edited or belongs to another key; restore it from a backup"
            ) from None
        cosigners = tuple((str(w["witness"]), int(w["time"])) for w in doc.get("cosigners", ()))
        return Checkpoint(checkpoint.origin, checkpoint.size, checkpoint.root, note, cosigners)

    def save(self, checkpoint: Checkpoint) -> None:
        """Replace the head held with ``checkpoint``, durably (call under ``locked()``)."""
        doc = {
            "version": _VERSION,
            "origin": checkpoint.origin,
            "size": checkpoint.size,
            "root": b64(checkpoint.root),
            "cosigners": [{"witness": w, "time": t} for w, t in checkpoint.cosigners],
            "checkpoint": checkpoint.note,
        }
        folder = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(doc, f, indent=1)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # the rename itself survives a crash
            finally:
                os.close(dir_fd)
        except OSError as e:
            raise OcrrError(
                f"cannot write the client state {self.path} ({e}); the checkpoint was verified but not kept: "
                "free space or fix permissions, and run again"
            ) from e
