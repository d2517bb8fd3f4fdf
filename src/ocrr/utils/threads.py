"""One place that pins thread pools: BLAS, OpenMP and torch on one thread.

Why: the heads are tiny and single-query retrieval is a memory-bound matrix-vector
product, so extra threads only fight over the cores (two sweep workers on two cores each
starting a pool per library made per-correction steps several times slower); and a fixed
thread count keeps floating-point summation order, hence results, the same everywhere.
threadpoolctl limits only libraries already loaded, so numpy's, scipy's and torch's pools are
loaded first. FAISS is not (importing it costs a quarter of a second, and most runs never use
it): its OpenMP and BLAS read ``OMP_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` when they
start, so those are set too, for a FAISS loaded later.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

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
