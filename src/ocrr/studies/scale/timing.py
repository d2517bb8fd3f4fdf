"""Query cost of an index, as the scale study and its real-embedding point report it."""

from __future__ import annotations

import time

import numpy as np
from threadpoolctl import threadpool_limits


def time_queries(index, queries: np.ndarray, k: int, threads: int, repeats: int = 3) -> dict:
    """Query cost, measured two ways because the machine is shared:

    * ``ms_per_query``: CPU time of the calling thread per query, one query per call, FAISS
      and BLAS limited to ONE thread -- so it is the single-query latency an idle core
      would see, unaffected by waiting for a CPU other processes hold (best of
      ``repeats`` passes; one pass when a pass takes over 30 s);
    * ``ms_per_query_wall``: the wall time of the same best pass;
    * ``ms_per_query_batched`` / ``cpu_ms_per_query_batched``: one call with all queries
      on ``threads`` threads, wall time and process CPU time (all threads) per query.
    """
    import faiss

    index.search(queries[:2], k)  # warm-up
    cpu = wall = np.inf
    faiss.omp_set_num_threads(1)
    try:
        with threadpool_limits(1):
            for _ in range(repeats):
                c0, t0 = time.thread_time(), time.perf_counter()
                for i in range(len(queries)):
                    index.search(queries[i : i + 1], k)
                cpu, took = min(cpu, time.thread_time() - c0), time.perf_counter() - t0
                wall = min(wall, took)
                if took > 30:
                    break
    finally:
        faiss.omp_set_num_threads(threads)
    b_cpu = b_wall = np.inf
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        index.search(queries, k)
        b_cpu, took = min(b_cpu, time.process_time() - c0), time.perf_counter() - t0
        b_wall = min(b_wall, took)
        if took > 30:
            break
    per = 1000 / len(queries)
    return {
        "ms_per_query": cpu * per,
        "ms_per_query_wall": wall * per,
        "ms_per_query_batched": b_wall * per,
        "cpu_ms_per_query_batched": b_cpu * per,
    }
