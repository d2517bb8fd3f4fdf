"""One place that pins thread pools: BLAS, OpenMP and torch on one thread.

Why: the heads are tiny and single-query retrieval is a memory-bound matrix-vector
product, so extra threads only fight over the cores (two sweep workers on two cores each
starting a pool per library made per-correction steps several times slower); and a fixed
thread count keeps floating-point summation order, hence results, the same everywhere.
The native libraries are loaded first: threadpoolctl only limits libraries already loaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

_PROCESS_LIMIT = None  # keeps threadpoolctl's process-wide limit alive


def _load_native_libraries() -> None:
    # Every library with its own thread pool that a run may use: numpy's BLAS, torch's
    # OpenMP, FAISS's OpenMP and BLAS, scipy's BLAS (river, scikit-learn).
    import faiss  # noqa: F401
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401
    import torch  # noqa: F401


def pin_threads(threads: int = 1) -> None:
    """For the rest of this process (a worker, a benchmark, a test module)."""
    global _PROCESS_LIMIT
    _load_native_libraries()
    import torch

    torch.set_num_threads(threads)
    _PROCESS_LIMIT = threadpool_limits(threads)


@contextmanager
def pinned_threads(threads: int = 1) -> Iterator[None]:
    """While inside (an in-process run); the previous settings come back afterwards."""
    _load_native_libraries()
    import torch

    before = torch.get_num_threads()
    with threadpool_limits(threads):
        torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)
