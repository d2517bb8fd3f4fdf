"""One place that sets thread pools: BLAS, OpenMP and torch on one thread, or on the cores a
pool's last tasks are given (``CoreBudget``).

Why: the heads are tiny and single-query retrieval is a memory-bound matrix-vector
product, so extra threads only fight over the cores (two sweep workers on two cores each
starting a pool per library made per-correction steps several times slower); and a fixed
thread count keeps floating-point summation order, hence results, the same everywhere.
threadpoolctl limits only libraries already loaded, so numpy's, scipy's and torch's pools are
loaded first. FAISS is not (importing it costs a quarter of a second, and most runs never use
it): its OpenMP and BLAS read ``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` when they
start, so those are set too, for a FAISS loaded later.

When fewer tasks remain than a pool has cores, their threads would idle the rest: the pool's
owner shares its cores among the tasks still running (``CoreBudget``), and a worker raises
the pools of a task whose system takes free cores (``System.takes_free_cores``) to that
share, at the task's start and between its checkpoints (or, for a system that spreads its own
work over threads, ``use_free_cores``, hands it the share). Other systems stay on one thread:
a thread count can change floating-point sums, and tiny heads only slow down with more.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext

from threadpoolctl import threadpool_limits

_PROCESS_LIMIT = None  # keeps threadpoolctl's process-wide limit alive
_LATE_LIBRARY_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read by a pool when it starts


def _load_native_libraries() -> None:
    # The libraries with their own thread pool that every run uses: numpy's BLAS, torch's
    # OpenMP, scipy's BLAS (river, scikit-learn). FAISS: see the module docstring.
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import torch  # noqa: F401


def pin_threads(threads: int = 1) -> None:
    """For the rest of this process (a worker, a benchmark, a test module)."""
    global _PROCESS_LIMIT
    _load_native_libraries()
    import torch

    os.environ.update(dict.fromkeys(_LATE_LIBRARY_VARIABLES, str(threads)))
    torch.set_num_threads(threads)
    _PROCESS_LIMIT = threadpool_limits(threads)


@contextmanager
def pinned_threads(threads: int = 1) -> Iterator[None]:
    """While inside (an in-process run); the previous settings come back afterwards."""
    _load_native_libraries()
    import torch

    before = torch.get_num_threads()
    variables = {name: os.environ.get(name) for name in _LATE_LIBRARY_VARIABLES}
    faiss_loaded = "faiss" in sys.modules
    os.environ.update(dict.fromkeys(_LATE_LIBRARY_VARIABLES, str(threads)))
    with threadpool_limits(threads):
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)
            for name, value in variables.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            if not faiss_loaded and "faiss" in sys.modules:  # started inside, pinned: unpin it
                sys.modules["faiss"].omp_set_num_threads(int(variables["OMP_NUM_THREADS"] or os.cpu_count() or 1))


class CoreBudget:
    """The threads each running task of a pool may use: the pool's ``cores`` shared equally
    among the tasks not yet finished, at least one each. The pool's owner is the one writer
    (``share_among``); its workers, given the budget when they start, read ``share()``.

    It only grows while a pool runs: the share exceeds one only once fewer tasks are left
    than cores, that is when nothing waits to start, so a raised task never takes a core
    that a starting task needs."""

    def __init__(self, cores: int, context: BaseContext):
        self.cores = max(1, int(cores))
        self._share = context.RawValue("i", 1)  # one writer; a worker reads a whole int

    def share_among(self, unfinished: int) -> int:
        """Called by the owner before it submits tasks and whenever one finishes."""
        self._share.value = max(1, self.cores // max(1, unfinished))
        return self._share.value

    def share(self) -> int:
        return int(self._share.value)


class TaskThreads:
    """A task's thread pools in a pool worker: one thread; or, when its system takes free
    cores, the budget's current share, looked up at the start and again at each checkpoint
    (between steps: never while a step computes). A system that spreads its own work over
    the cores (``spreads_itself``: it runs independent pieces at once, each on one thread)
    keeps its pools on one thread and reads the share through ``offered``. ``most`` is the
    largest share it was given."""

    def __init__(self, takes_free_cores: bool, share: Callable[[], int], spreads_itself: bool = False):
        self.takes_free_cores = takes_free_cores
        self.share = share
        self.spreads_itself = spreads_itself
        import torch  # loaded by every worker: its count stands for all the pools set together

        self.current = torch.get_num_threads()
        self.most = 1

    def offered(self) -> int:
        """The threads the task may use now (one unless its system takes free cores)."""
        threads = self.share() if self.takes_free_cores else 1
        self.most = max(self.most, threads)
        return threads

    def update(self) -> None:
        threads = 1 if self.spreads_itself else self.offered()
        if threads != self.current:
            pin_threads(threads)
            self.current = threads
