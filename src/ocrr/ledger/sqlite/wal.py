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
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from ocrr.ledger.sqlite.schema import connect
from ocrr.utils.thread_names import name_os_thread

__all__ = ["CHECKPOINT_BYTES", "BackgroundCheckpoints", "no_checkpoints_in_commits"]

# SQLite's own default: a checkpoint every 1,000 pages of 4 KiB written to the log.
CHECKPOINT_BYTES = 1000 * 4096


def no_checkpoints_in_commits(conn: sqlite3.Connection) -> None:
    """Commits on ``conn`` no longer checkpoint the log (``BackgroundCheckpoints`` does)."""
    conn.execute("PRAGMA wal_autocheckpoint=0")


class BackgroundCheckpoints:
    """Passive checkpoints of the ledger file ``path`` in a thread, each once about
    ``every`` bytes were committed since the last one (the committer tells it: ``committed``)."""

    def __init__(self, path: Path, every: int = CHECKPOINT_BYTES):
        self.every = every
        self._conn = connect(path)  # WAL with synchronous=FULL, as every writer of the file
        no_checkpoints_in_commits(self._conn)
        self._cv = threading.Condition()
        self._pending = 0  # bytes committed since the last checkpoint began
        self._closed = False
        self.done = 0  # checkpoints that copied the whole log into the file
        self._thread = threading.Thread(target=self._run, name="ocrr-wal-checkpoint", daemon=True)
        self._thread.start()

    def committed(self, nbytes: int) -> None:
        """About ``nbytes`` were just committed to the log; checkpoint once enough are."""
        with self._cv:
            self._pending += nbytes
            if self._pending >= self.every:
                self._cv.notify_all()

    def wait(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` checkpoints copied the whole log (False: ``timeout`` passed first)."""
        with self._cv:
            return self._cv.wait_for(lambda: self.done >= count, timeout)

    def _run(self) -> None:
        name_os_thread()
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._closed or self._pending >= self.every)
                if self._closed:
                    return
                self._pending = 0
            try:
                busy, logged, copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:  # another process's checkpoint holds the file's checkpoint lock
                continue  # (then it does the work; ours comes again after the next bytes)
            if not busy and copied == logged:  # (a reader on an older snapshot leaves some: next time)
                with self._cv:
                    self.done += 1
                    self._cv.notify_all()

    def close(self) -> None:
        """Stop the thread (a checkpoint in progress ends first) and close its connection."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()
        self._conn.close()
