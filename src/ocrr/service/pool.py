"""Predicts by vector that arrive together share one search.

A search reads every stored vector (10k x 384 float32 is 15 MB, more than a small box's
caches hold), so under concurrent load the service spends its time streaming
the same matrix once per request. The pool collects the predicts that reach the event
loop in the same turn (and those that arrive while a search runs), and answers them with
one pass over the vectors (``PersistentSubstrate.explain_each``: each answer is the one
the request would get alone). Up to ``passes`` searches run at once (one per core: the
scan releases the GIL), so a request waits for a search only when every search thread is
busy, and then for the first to finish and its own; nothing waits on a timer.

The pass goes through a signed 8-bit shortlist (``index/int8_shortlist.py``,
``SHORTLIST_CODE``): a quarter of the float32 bytes, scanned as integer dot products, the
answer still proven exact. Each worker process holds its own copy, and what two workers
stream at once decides the speed: with two processes scanning, FAISS's 8-bit codes beat
float16, though alone both take the same time, and SimSIMD's integer scan of the same bytes
takes about half of FAISS's (docs/service.md, "How a request runs", has the figures).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

import numpy as np

from ocrr.index.exact import AnyShortlist, ExactIndex
from ocrr.systems.substrate.persistent import Explanation, PersistentSubstrate

#: The code of the shortlist pooled searches go through (``exact.SHORTLIST_CODES``).
SHORTLIST_CODE = "i8"


class PredictPool:
    """``await pool.explain(queries)`` -> ``substrate.explain(queries)``, pooled.

    Queries must be checked already (``substrate.check_queries``). A pooled search runs on
    the event loop when it reads at most ``inline_floats`` numbers per query (the thread
    hop costs more than a small scan), else on ``executor``; at most ``passes`` at a time
    (``executor`` needs that many threads). ``code``: the shortlist's (``SHORTLIST_CODE``)."""

    def __init__(
        self,
        substrate: PersistentSubstrate,
        executor: Executor,
        inline_floats: int,
        shortlist: bool = True,
        passes: int = 1,
        code: str = SHORTLIST_CODE,
    ):
        if passes < 1:
            raise ValueError(f"passes must be at least 1, got {passes}")
        self.substrate, self.executor, self.inline_floats = substrate, executor, inline_floats
        self.shortlist: AnyShortlist | None = None
        self.use_shortlist, self.code = shortlist, code
        self.max_running = passes
        self._waiting: list[tuple[np.ndarray, asyncio.Future]] = []
        self._running = 0  # searches under way (or scheduled)
        self.passes = self.requests = 0  # searches run and the requests they answered (for /metrics)

    def explain(self, queries: np.ndarray) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting.append((queries, future))
        if self._running < self.max_running and len(self._waiting) == 1:  # the first to wait: start a search
            self._running += 1
            loop.call_soon(self._start)  # after the other requests that are ready this turn
        return future

    def _start(self) -> None:
        if not self._waiting:  # taken by a search that started meanwhile
            self._running -= 1
            return
        batch, self._waiting = self._waiting, []
        self.passes += 1
        self.requests += len(batch)
        if self._floats_per_query() <= self.inline_floats:
            self._finish(batch, self._search(batch))
        else:
            try:
                task = asyncio.get_running_loop().run_in_executor(self.executor, self._search, batch)
            except RuntimeError as e:  # the executor is shut down (the service is stopping)
                return self._finish(batch, e)
            task.add_done_callback(lambda t: self._finish(batch, t.result()))

    def _floats_per_query(self) -> float:
        """About how many numbers one query's search reads: every row of the ledger, or the
        lists an IVF index probes (a small share at any size: searched on the loop, as a
        short scan is, rather than paying two thread hand-offs per request)."""
        led = self.substrate.ledger
        share = getattr(self.substrate.system.index_, "probed_share", 1.0)
        return len(led) * (led.dim or 0) * share

    def warm(self) -> None:
        """Build the shortlist now (a pass over every row), not during the first requests."""
        index = self.substrate.system.index_
        # Only an exact index over the ledger's own rows has its searches pooled
        # (``explain_each``), so only it needs the coded copy: its own (one copy per process:
        # its few-query searches then read 8-bit codes too). A bounded substrate's index (its
        # live rows) or an approximate one answers each request itself, and an 8-bit copy of
        # every ledger row would be memory no search reads.
        if self.use_shortlist and self.shortlist is None and isinstance(index, ExactIndex) and index.borrowed:
            self.shortlist = index.shortlist(self.code)
            self.shortlist.grow_ahead()  # the service keeps taking in rows while it answers
        if self.shortlist is not None and len(self.substrate):
            with self.substrate.ledger.lock.read():
                ledger = self.substrate.system.ledger_
                assert ledger is not None  # the file holds entries, so they were fed to the substrate
                self.shortlist.catch_up(ledger.vectors)

    def _search(self, batch) -> list | BaseException:
        try:
            if self.shortlist is None:
                self.warm()
            return self.substrate.explain_each([queries for queries, _ in batch], self.shortlist)
        except Exception as e:  # noqa: BLE001 - handed to every request of the batch
            return e

    def _finish(self, batch, result: list[list[Explanation]] | BaseException) -> None:
        for j, (_, future) in enumerate(batch):
            if future.cancelled():  # the client went away
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result[j])
        if self._waiting:  # arrived while every search thread was busy: the next search
            asyncio.get_running_loop().call_soon(self._start)
        else:
            self._running -= 1
