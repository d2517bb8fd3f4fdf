"""WAL checkpoints off the commit path: the ledger's own thread copies the log into the file.

In WAL mode a commit appends its pages to the log (``<file>-wal``) and fsyncs it; now and then
the log's pages must be copied back into the database file (a checkpoint), or the log grows
without end. SQLite's default runs that checkpoint inside the commit that takes the log past
1,000 pages (``wal_autocheckpoint``): that commit then also writes and fsyncs the database file
before it is acknowledged, and every correction waiting for it waits for that too. The ledger's
writing connections turn it off (``wal_autocheckpoint=0``), and ``BackgroundCheckpoints`` runs
``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own, in a thread of its own, once
about as many bytes were committed since its last checkpoint. A passive checkpoint never
blocks a reader or a writer, and SQLite keeps it crash-safe with ``synchronous=FULL``: the log
is synced before its pages are copied and the file after, and a commit is durable once its log
is synced, checkpointed or not. When the last connection to the file closes, SQLite
checkpoints what is left and removes the log, as it always did.

A passive checkpoint copies the log as it was when it began, and SQLite starts the log over
(writing from its beginning again) only at a commit that finds all of it copied; under a
steady stream of commits that never happens, and the log would grow as long as the stream
lasts. So once ``restart_every`` bytes were committed since the log last started over, the
checkpoint waits for the writers' turn (``writers_turn``: between two commits) and runs
``PRAGMA wal_checkpoint(RESTART)``, which copies what is left and lets the next commit start
the log over. Commits wait for that one checkpoint; it never waits for a reader (if one still
reads the log, it is tried again after the next ``every`` bytes).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from ocrr.ledger.sqlite.schema import connect
from ocrr.utils.thread_names import name_os_thread

__all__ = ["CHECKPOINT_BYTES", "RESTART_BYTES", "BackgroundCheckpoints", "no_checkpoints_in_commits"]

# SQLite's own default: a checkpoint every 1,000 pages of 4 KiB written to the log.
CHECKPOINT_BYTES = 1000 * 4096
# How large the log may grow under commits that never pause before it is made to start over.
RESTART_BYTES = 16 * CHECKPOINT_BYTES


def no_checkpoints_in_commits(conn: sqlite3.Connection) -> None:
    """Commits on ``conn`` no longer checkpoint the log (``BackgroundCheckpoints`` does)."""
    conn.execute("PRAGMA wal_autocheckpoint=0")


class BackgroundCheckpoints:
    """Passive checkpoints of the ledger file ``path`` in a thread, each once about
    ``every`` bytes were committed since the last one (the committer tells it: ``committed``),
    and a restarting one in the writers' turn (``writers_turn()``, a context manager) once
    ``restart_every`` bytes were committed since the log last started over."""

    def __init__(
        self,
        path: Path,
        every: int = CHECKPOINT_BYTES,
        writers_turn: Callable[[], AbstractContextManager] | None = None,
        restart_every: int = RESTART_BYTES,
    ):
        self.every, self.restart_every, self._writers_turn = every, restart_every, writers_turn
        self._conn = connect(path)  # WAL with synchronous=FULL, as every writer of the file
        no_checkpoints_in_commits(self._conn)
        self._conn.execute("PRAGMA busy_timeout=0")  # a restart never waits for a reader (it is tried again)
        self._cv = threading.Condition()
        self._pending = 0  # bytes committed since the last checkpoint began
        self._since_restart = 0  # bytes committed since the log last started over
        self._closed = False
        self.done = 0  # checkpoints that copied the whole log into the file
        self.restarts = 0  # checkpoints after which the next commit starts the log over
        self._thread = threading.Thread(target=self._run, name="ocrr-wal-checkpoint", daemon=True)
        self._thread.start()

    def committed(self, nbytes: int) -> None:
        """About ``nbytes`` were just committed to the log; checkpoint once enough are."""
        with self._cv:
            self._pending += nbytes
            if self._pending >= self.every:
                self._cv.notify_all()

    def wait(self, count: int, timeout: float, restarts: bool = False) -> bool:
        """Wait until ``count`` checkpoints copied the whole log (``restarts``: ``count`` of them
        let the log start over); False: ``timeout`` passed first."""
        with self._cv:
            return self._cv.wait_for(lambda: (self.restarts if restarts else self.done) >= count, timeout)

    def _run(self) -> None:
        name_os_thread()
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._closed or self._pending >= self.every)
                if self._closed:
                    break
                self._since_restart += self._pending
                self._pending = 0
                restart = self._writers_turn is not None and self._since_restart >= self.restart_every
            try:
                if restart:
                    assert self._writers_turn is not None
                    with self._writers_turn():
                        busy, logged, copied = self._conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                else:
                    busy, logged, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:  # another process's checkpoint holds the file's checkpoint lock
                continue  # (then it does the work; ours comes again after the next bytes)
            if not busy and copied == logged:  # (a reader on an older snapshot leaves some: next time)
                with self._cv:
                    self.done += 1
                    if restart:
                        self.restarts += 1
                        self._since_restart = 0
                    self._cv.notify_all()
        self._conn.close()

    def close(self) -> None:
        """Stop the thread (a checkpoint in progress ends first; it closes its connection).
        Idempotent; called from the thread itself (a ledger collected there), it only tells it."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join()
