"""Hashing the next group's entries while the current group's commit is being flushed.

An entry's chain hash and Merkle leaf are two SHA-256 over its whole encoding, and they
depend only on the entry, its id and the hash before it (``ocrr.ledger.verify.entry_bytes``).
Once a group commit has hashed its own entries, the id and the chain hash the next group
starts from are known; while that commit writes and waits for its flush (which lets go of
the GIL), ``HashAhead``'s thread hashes the appends queued behind it, chained on from there,
and leaves the result on each queued item (``Pending.hashed``). The next commit takes an
item's hashes only if it really starts that item at the same id after the same chain hash
(``hashed_rows``): when a commit failed, or another process appended in between, the item is
simply hashed again, so what is stored is the same bytes either way.
"""

from __future__ import annotations

import hashlib
import threading

from ocrr.ledger.chain import F4LE
from ocrr.ledger.group_commit import Pending
from ocrr.ledger.verify import entry_bytes, leaf_hash
from ocrr.utils.thread_names import name_os_thread

__all__ = ["HashAhead", "Hashed", "hashed_rows"]

# (first id, chain hash before it, rows (id, label, text, vector bytes, prev_hash, hash), leaves, digests)
Hashed = tuple[int, bytes, list[tuple], list[bytes], list[bytes]]


def hashed_rows(item: Pending, start: int, prev: bytes) -> Hashed:
    """``item``'s entries as ids ``start``.. chained on from ``prev``: what its hashing
    ahead left, when it started from the same place, else hashed now."""
    ahead = item.hashed
    if ahead is not None and ahead[0] == start and ahead[1] == prev:
        return ahead
    return _hash(item, start, prev)


def _hash(item: Pending, start: int, prev: bytes) -> Hashed:
    rows, leaves, digests = [], [], []
    first, n = prev, start
    sha256 = hashlib.sha256
    blob = item.vecs.astype(F4LE, copy=False).tobytes()  # every row's bytes at once, sliced below
    width = len(blob) // len(item.labels)
    for j, (label, text) in enumerate(zip(item.labels, item.texts)):
        raw = blob[j * width : (j + 1) * width]
        pre = entry_bytes(n, label, text, raw, prev)
        digest = sha256(pre).digest()
        rows.append((n, label, text, raw, prev, digest))
        leaves.append(leaf_hash(pre))
        digests.append(digest)
        prev, n = digest, n + 1
    return start, first, rows, leaves, digests


class HashAhead:
    """A thread that hashes queued appends ahead of their commit (see the module's text).

    The committer calls ``pause()`` before it reads what was left on its items, and
    ``resume(queue, start, prev)`` once it knows where the next group starts (``queue``: the
    list new appends are added to, whose items it hashes in order); the queue's owner calls
    ``queued()`` after adding to it. The thread starts at the first ``resume``."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._queue: list[Pending] | None = None  # None: paused
        self._next = 0  # the first item of _queue not hashed yet
        self._start, self._prev = 0, b""
        self._busy = False  # hashing an item now, outside the lock
        self._closed = False
        self._thread: threading.Thread | None = None

    def pause(self) -> None:
        """Stop hashing ahead; returns once no item is being hashed (at most one was)."""
        with self._cv:
            self._queue = None
            while self._busy:
                self._cv.wait()

    def resume(self, queue: list[Pending], start: int, prev: bytes) -> None:
        """Hash ``queue``'s items, from its first, as ids ``start``.. after chain hash ``prev``."""
        with self._cv:
            if self._closed:
                return
            self._queue, self._next, self._start, self._prev = queue, 0, start, prev
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ocrr-hash-ahead", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def queued(self) -> None:
        """An append was added to the queue: hash it too, if hashing ahead."""
        if self._queue is not None:  # (a racy look: at worst one wake-up more or the next resume)
            with self._cv:
                self._cv.notify_all()

    def wait_hashed(self, timeout: float) -> bool:
        """Wait until every item of the queue is hashed or hashing ahead is paused (False:
        ``timeout`` passed first)."""
        with self._cv:
            return self._cv.wait_for(
                lambda: not self._busy and (self._queue is None or self._next >= len(self._queue)), timeout
            )

    def close(self) -> None:
        with self._cv:
            self._closed, self._queue = True, None
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        name_os_thread()
        with self._cv:
            while not self._closed:
                queue = self._queue
                if queue is None or self._next >= len(queue):
                    self._cv.wait()
                    continue
                item, start, prev = queue[self._next], self._start, self._prev
                self._busy = True
                self._cv.release()
                try:
                    item.hashed = hashed = _hash(item, start, prev)
                except Exception:  # noqa: BLE001 - its commit hashes it again and reports the error
                    hashed = None
                finally:
                    self._cv.acquire()
                    self._busy = False
                    self._cv.notify_all()
                if hashed is None:
                    self._queue = None  # nothing to chain the next item on: wait for the next resume
                elif self._queue is queue:  # not paused meanwhile: the next item follows this one
                    self._next += 1
                    self._start, self._prev = start + len(hashed[2]), hashed[4][-1]
