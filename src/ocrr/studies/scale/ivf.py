"""The scale study's IVF backends: one k-means and one list assignment shared by every IVF
kind of a scale, a float32 vector store for the re-rank, and the tuning (target recall and/or vote agreement).

The store. The re-rank reads float32 rows, as the substrate's would read its ledger: in
RAM when the study keeps the vectors anyway, else a scratch file in ``vectors_dir``,
written with ``pwrite`` and read with ``pread`` (``ocrr.index.file_rows``), so that only
the rows a query re-ranks are read (10M x 384 float32 = 15.4 GB stays on disk and in the
kernel's page cache, mapped into no process: through a memory map the kernel also maps
the cached neighbours of every page a re-rank touches, many times the bytes read, and the
process then shows the file as its own resident memory; ``ocrr.studies.scale.memory``).
``time_cold_queries`` measures what a query costs when the rows are not cached at all.

The build, for ``N`` entries: (1) the first pass over the stream (shared with the other
backends) writes the store and keeps an even spread of ``nlist x train_per_list``
entries as the training sample; (2) k-means (``IVFIndex.kmeans``) on that sample;
(3) each kind trains its codes on the sample's residuals; (4) a second pass assigns each
chunk to its list once and adds it to every kind (fast-scan PQ assigns for itself: FAISS
cannot add precomputed assignments to its block-packed lists). Each kind's build time is the sum of
(2), its own (3), (4)'s assignment (if it used it) and its own adds: what building that
kind alone costs.
(5) With ``target_recall`` and/or ``target_agreement`` set, each kind is tuned
(``ocrr.index.ivf_tune``) on ``tune_queries`` stored entries, left out of their own
answer, whose exact neighbours were computed during the first pass from the generated
chunks (not read back through the map, so the ground truth puts no file pages into the
process).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ocrr.index import make_index
from ocrr.index.file_rows import FileRows
from ocrr.index.ivf import IVFIndex, nlist_for
from ocrr.utils.files import write_at
from ocrr.utils.heap import release_free_heap

#: Rows per add in the second pass. An add holds the rows read and, inside FAISS, their
#: residuals (4 x dim bytes a row each): 16k rows keep that near 50 MB at d = 384, where
#: 64k rows raised the peak of a 10M build (docs/reference/measurements.md). FAISS sorts each add's rows by list
#: with a stable sort, so the lists come out the same for any chunking.
ADD_ROWS = 16_384


class VectorStore:
    """float32 rows 0..n-1, in RAM or in a scratch file (deleted by ``close``)."""

    def __init__(self, n: int, dim: int, in_memory: bool, folder: str | None = None):
        self.n, self.dim = n, dim
        self.path: str | None = None
        self._fd: int | None
        self.array: np.ndarray | FileRows  # what the re-rank reads: FileRows reads the file's rows
        if in_memory:
            self.array = np.empty((n, dim), np.float32)
            self._fd = None
        else:
            fd, self.path = tempfile.mkstemp(prefix="ocrr-scale-", suffix=".f32", dir=folder)
            os.ftruncate(fd, n * dim * 4)
            self._fd = fd
            self.array = FileRows(fd, n, dim)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # re-rank reads scattered rows: no readahead

    def write(self, first: int, x: np.ndarray) -> None:
        if isinstance(self.array, np.ndarray):  # in RAM (no file)
            self.array[first : first + len(x)] = x
        else:
            write_at(self.array.fd, np.ascontiguousarray(x, np.float32).tobytes(), first * self.dim * 4)

    def read(self, lo: int, hi: int) -> np.ndarray:
        return np.asarray(self.array[lo:hi])  # in RAM: a view; on disk: FileRows reads the range

    def matrix(self) -> np.ndarray | FileRows:
        return self.array

    def drop_cache(self) -> bool:
        """Evict the file's pages from the page cache, so the next re-ranks read from disk
        (a cold start). False when the rows are in RAM."""
        if self._fd is None:
            return False
        os.fsync(self._fd)  # written pages must be clean before the kernel can drop them
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True

    def close(self) -> None:
        if self._fd is not None:
            assert self.path is not None  # the scratch file of a store that has a descriptor
            os.close(self._fd)
            self._fd = None
            del self.array
            os.unlink(self.path)


def time_cold_queries(index, queries: np.ndarray, k: int, store: VectorStore) -> dict:
    """Single queries right after the vector file left the page cache: each re-ranked row
    is a disk read. Wall time per query (the thread waits for the disk, so CPU time would
    hide it), one query per call on one thread, one pass; and how many MB those queries
    read from the disk (``read_bytes`` of /proc/self/io: what the storage layer fetched)."""
    import faiss

    if not store.drop_cache():
        return {}
    before = _disk_read_mb()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with threadpool_limits(1):
            c0, t0 = time.thread_time(), time.perf_counter()
            for i in range(len(queries)):
                index.search(queries[i : i + 1], k)
            cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    finally:
        faiss.omp_set_num_threads(threads)
    per = 1000 / len(queries)
    return {
        "ms_per_query_cold_wall": wall * per,
        "ms_per_query_cold_cpu": cpu * per,
        "disk_mb_cold_queries": _disk_read_mb() - before,
    }


def _disk_read_mb() -> float:
    """MB this process has made the storage layer read (/proc/self/io ``read_bytes``)."""
    try:
        for line in open("/proc/self/io"):
            if line.startswith("read_bytes:"):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return float("nan")


def _ivf_index(kind: str, dim: int, source: Callable[[], np.ndarray | FileRows], **params: Any) -> IVFIndex:
    """``make_index`` for an IVF kind, re-ranking from ``source`` (the store's rows)."""
    # make_index annotates source as returning an ndarray; FileRows is its documented stand-in
    # for rows on disk (ocrr.index.file_rows: "FileRows is what the index's source returns")
    index = make_index(kind, dim, source=source, **params)  # type: ignore[arg-type]
    assert isinstance(index, IVFIndex), f"{kind} is not an IVF kind"
    return index


class IVFBuild:
    def __init__(
        self,
        kinds: list[str],
        n: int,
        dim: int,
        store: VectorStore,
        nlist: int,
        nprobe: int,
        rerank: int,
        train_per_list: int,
        seed: int,
    ):
        self.n, self.store = n, store
        self.nlist = nlist or nlist_for(n)
        self.indexes = {
            kind: _ivf_index(
                kind,
                dim,
                source=store.matrix,
                nlist=self.nlist,
                nprobe=nprobe,
                rerank=rerank,
                train_per_list=train_per_list,
                ivf_min_train=n + 1,
                retune_growth=0,
                retrain_growth=0,
                seed=seed,
            )
            for kind in kinds
        }
        self.step = max(1, n // (self.nlist * train_per_list))
        # ids 0, step, 2 step, ...: filled in place, so the sample is never held twice
        self._sample = np.empty((-(-n // self.step), dim), np.float32)
        self.seconds = {
            "kmeans": 0.0,
            "assign": 0.0,
            **{f"train {k}": 0.0 for k in kinds},
            **{f"add {k}": 0.0 for k in kinds},
        }
        self.cpu = dict.fromkeys(self.seconds, 0.0)

    def collect(self, first: int, x: np.ndarray) -> None:
        """Keep the chunk's rows whose id is a multiple of the sampling step."""
        offset = (-first) % self.step
        lo = (first + offset) // self.step
        taken = x[offset :: self.step]
        self._sample[lo : lo + len(taken)] = taken

    def _timed(self, what: str, fn, *args):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args)
        self.seconds[what] += time.perf_counter() - t0
        self.cpu[what] += time.process_time() - c0
        return out

    def finish(self, add_rows: int = ADD_ROWS, progress=None) -> None:
        sample, self._sample = self._sample, np.empty((0, self.store.dim), np.float32)
        first = next(iter(self.indexes.values()))
        self._shared_assign = any(index.takes_assignments for index in self.indexes.values())
        centroids = self._timed("kmeans", first.kmeans, sample, self.n)
        for kind, index in self.indexes.items():
            self._timed(f"train {kind}", index.train, sample, centroids)
        del sample
        for lo in range(0, self.n, add_rows):
            hi = min(self.n, lo + add_rows)
            x = self.store.read(lo, hi)
            ids = np.arange(lo, hi, dtype=np.int64)
            lists = self._timed("assign", first.assign, x) if self._shared_assign else None
            for kind, index in self.indexes.items():
                self._timed(f"add {kind}", index.add, x, ids, lists)
            if progress and lo // (1 << 20) != hi // (1 << 20):
                progress(f"ivf adds {hi:,}/{self.n:,}")
        release_free_heap()

    def build_seconds(self, kind: str, cpu: bool = False) -> float:
        """k-means + this kind's code training + list assignment + its adds (fast-scan PQ
        assigns inside its own adds, so the shared assignment is not counted for it)."""
        t = self.cpu if cpu else self.seconds
        shared = t["assign"] if self.indexes[kind].takes_assignments else 0.0
        return t["kmeans"] + shared + t[f"train {kind}"] + t[f"add {kind}"]

    def tune(
        self,
        kind: str,
        target: float,
        k: int,
        sample,
        target_agreement: float = 0.0,
        label_of=None,
        tolerance: float = 0.0,
    ) -> dict:
        index = self.indexes[kind]
        index.label_of = label_of
        t0 = time.perf_counter()
        out = index.tune(target, k, sample=sample, target_agreement=target_agreement, tolerance=tolerance)
        out["tune_s"] = time.perf_counter() - t0
        return out
