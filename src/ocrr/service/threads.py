"""The service's thread settings: one BLAS / OpenMP / torch thread per request thread, and
(``--pin-workers``) one core per worker.

Requests run in parallel threads (the service's own pools), so each library's own thread
pool would only fight them over the cores.
"""

from __future__ import annotations

import os
import sys

from threadpoolctl import threadpool_limits


def limit_threads() -> None:
    """Requests run in parallel threads: one BLAS / OpenMP / torch thread each beats pools that
    fight over the cores (a search and a MiniLM sentence each cost several times as much with
    two threads: docs/reference/measurements.md). Call once everything is loaded."""
    import faiss  # noqa: F401 - loaded before the limit, which then covers its OpenMP pool (the predict shortlist)

    threadpool_limits(1)
    # A request that releases the GIL often (a model's many small ops, a BLAS call) waits up
    # to the switch interval to get it back from a busy thread: keep that wait short.
    sys.setswitchinterval(0.0005)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def one_omp_thread() -> None:
    """One OpenMP thread for the FAISS calls of this thread (the shortlist's scan). OpenMP's
    thread count is a per-thread setting that new threads take from the environment, and
    FAISS's wheel brings its own OpenMP runtime that threadpoolctl does not reach: left at
    one thread per core, its idle workers spin after every search (multiplying the server's
    CPU per request: docs/reference/measurements.md), taking the core the other requests need. The
    service's parallelism is its own threads, one search per core."""
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss.omp_set_num_threads(1)


def pin_to_core(slot: int) -> int:
    """Keep this thread, and every thread it starts from now on, on one core: the
    ``slot``-th of the cores this process may use (round the list again past its end).
    Returns that core. A worker that stays on its core finds its own data in that core's
    caches (10k rows of 384 as 8-bit codes are 3.8 MB, the size of a small core's L2) rather
    than what another worker left there. Linux only (``ServiceConfig`` refuses it elsewhere)."""
    core = core_for_slot(slot)
    os.sched_setaffinity(0, {core})  # 0: this thread; threads started later inherit its mask
    return core


def core_for_slot(slot: int) -> int:
    """The core worker ``slot`` is pinned to: the ``slot``-th of the cores this process may
    use, rounding the list again past its end."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[slot % len(cores)]
