"""The first query after opening a saved IVF index, each probe in a fresh process.

A restarted service opens its index (``ocrr.index.ivf_file.open_ivf``) and answers: its
first query pays whatever a process pays once (FAISS's code paged in, its thread pool,
the coarse quantiser's graph, numpy's re-rank path) plus the re-ranked rows of the vector
file, which a restart finds evicted. ``time_first_query_after_open`` saves the index,
then for ``warm`` off and on runs ``PROBES`` fresh processes; each evicts the vector file
from the page cache, opens the index, and times (wall) its first query -- a different
query in each probe -- and then the other queries one by one (their median: the steady
single-query latency after the open). The parent reports each variant's median first
query, the open time and the child's peak RSS (VmHWM).

Run as ``python -m ocrr.studies.scale.reopen INDEX VECTORS N DIM QUERIES.npy K WARM FIRST``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PROBES = 3


def _evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM, MiB). Not ``ru_maxrss``: a child started by fork and exec
    inherits its parent's maximum there, so it would report the study's peak, not its own."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def probe(index_path: str, vectors: str, n: int, dim: int, queries: np.ndarray, k: int, warm: bool, first: int) -> dict:
    """In this process: evict the vector file, open the index, time the first query (query
    ``first``) and then every other query once."""
    import faiss

    from ocrr.index.file_rows import FileRows
    from ocrr.index.ivf_file import open_ivf

    faiss.omp_set_num_threads(1)
    _evict(vectors)
    fd = os.open(vectors, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    rows = FileRows(fd, n, dim)
    t0 = time.perf_counter()
    index = open_ivf(index_path, source=lambda: rows, warm=warm)
    open_s = time.perf_counter() - t0
    q = queries[first : first + 1]
    t0 = time.perf_counter()
    index.search(q, k)
    first_ms = (time.perf_counter() - t0) * 1e3
    rest = []
    for i in range(len(queries)):
        if i != first:
            t0 = time.perf_counter()
            index.search(queries[i : i + 1], k)
            rest.append((time.perf_counter() - t0) * 1e3)
    os.close(fd)
    return {
        "open_s": open_s,
        "first_ms": first_ms,
        "p50_ms": float(np.median(rest)) if rest else float("nan"),
        "max_rss_mb": _peak_rss_mb(),
    }


def time_first_query_after_open(index, vectors: str, queries: np.ndarray, k: int, folder: str) -> dict:
    """Save ``index`` next to ``vectors``, then probe the first query after opening it, cold
    (``warm=False``) and warmed at open (``warm=True``), ``PROBES`` fresh processes each."""
    from ocrr.index.ivf_file import save_ivf

    base = Path(folder) / f"{Path(vectors).name}.ivf"
    qpath = Path(folder) / f"{Path(vectors).name}.queries.npy"
    save_ivf(index, base)
    np.save(qpath, np.ascontiguousarray(queries, np.float32))
    out: dict = {}
    try:
        for warm in (False, True):
            got = []
            for first in range(PROBES):
                cmd = [sys.executable, "-m", "ocrr.studies.scale.reopen", str(base), vectors]
                cmd += [str(len(index._alive[: index._rows])), str(index.dim), str(qpath), str(k), str(int(warm))]
                proc = subprocess.run(cmd + [str(first)], stdout=subprocess.PIPE, text=True, check=True)
                got.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            tag = "warm_open" if warm else "open"
            out[f"first_query_ms_{tag}"] = float(np.median([g["first_ms"] for g in got]))
            out[f"first_query_ms_{tag}_max"] = float(max(g["first_ms"] for g in got))
            out[f"p50_ms_after_{tag}"] = float(np.median([g["p50_ms"] for g in got]))
            out[f"open_s_{tag}"] = float(np.median([g["open_s"] for g in got]))
            out[f"reopen_max_rss_mb_{tag}"] = float(max(g["max_rss_mb"] for g in got))
    finally:
        for path in (base, Path(f"{base}.npz"), qpath):
            path.unlink(missing_ok=True)
    return out


def _main(argv: list[str]) -> None:
    index_path, vectors, n, dim, qpath, k, warm, first = argv
    queries = np.load(qpath)
    print(json.dumps(probe(index_path, vectors, int(n), int(dim), queries, int(k), warm == "1", int(first))))


if __name__ == "__main__":
    _main(sys.argv[1:])
