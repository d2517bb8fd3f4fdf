"""Corrections from the event loop into the ledger's group commit, without a thread each.

``await commits.append(vecs, labels, texts)`` queues the entries with
``LedgerStore.submit`` and returns their ids once they are on disk. The ledger's one
committer thread commits whatever is queued as one group (one fsync), and the answers come
back to the event loop in one wake-up per group: a thread per waiting correction cost,
per correction, a hand-off to the pool, a wake-up of every waiting thread at each commit
and a wake-up of the loop, which took more of the process's one GIL than the commit itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

import numpy as np

from ocrr.ledger.store import LedgerStore


class Commits:
    """Appends to ``ledger`` for the coroutines of one event loop."""

    def __init__(self, ledger: LedgerStore):
        self.ledger = ledger
        self._settled: list[tuple[asyncio.Future, range | None, BaseException | None]] = []
        self._lock = threading.Lock()  # _settled: filled by the committer thread, emptied by the loop

    def append(
        self,
        vecs: np.ndarray,
        labels: list[str],
        texts: Sequence[str | None] | None,
        check: Callable[[], None] | None,
    ) -> asyncio.Future:
        """A future of the entries' ids, set once they are committed (or of the error that
        failed them). ``check``: run by the committer just before the group is written
        (``LedgerStore.submit``). Bad input raises here, before anything is queued."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.ledger.submit(vecs, labels, texts, lambda ids, err: self._done(loop, future, ids, err), check)
        return future

    def _done(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future, ids, err) -> None:
        """In the committer thread: keep the outcome; the first of a group wakes the loop."""
        with self._lock:
            self._settled.append((future, ids, err))
            first = len(self._settled) == 1
        if first:
            try:
                loop.call_soon_threadsafe(self._settle)
            except RuntimeError:  # the loop is closed: nobody waits for these answers any more
                pass

    def _settle(self) -> None:
        """On the loop: answer every correction settled since the last wake-up."""
        with self._lock:
            settled, self._settled = self._settled, []
        for future, ids, err in settled:
            if future.cancelled():  # the client went away; its entries are committed all the same
                continue
            if err is not None:
                future.set_exception(err)
            else:
                future.set_result(ids)
