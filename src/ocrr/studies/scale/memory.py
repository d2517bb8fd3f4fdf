"""Resident memory of the scale study's process, split the way the kernel accounts it.

``RssAnon`` is memory only this process holds (the index's codes and lists, the
interpreter, numpy buffers): it must fit in RAM. ``RssFile`` is pages of files mapped
into the process -- here the memory-mapped float32 vector file the IVF re-rank reads.
Those pages belong to the kernel's page cache, are clean (read-only mapping) and are
reclaimed under memory pressure; they count in the process's RSS as soon as it maps
them. The kernel also maps already-cached neighbours of a faulting page ("fault-around";
on a freshly written file, touching random rows added hundreds of times their bytes to
RssFile, and little when the file was not cached: docs/scale/ivf.md), so RssFile says how much of the
file was in the page cache near the rows read, not how much the queries needed.
``ru_maxrss`` (the peak of the two together) is what the study reported before.

``MemorySampler`` polls /proc/self/status from a daemon thread (every 0.25 s) and keeps
the peak of each; ``mark(name)`` records both at the end of a named phase and their peaks
during it (since the previous mark), so the harness's phases (the first pass generating
the data and computing the exact ground truth) can be told apart from the index's (build,
tuning, queries).
"""

from __future__ import annotations

import math
import threading
import tracemalloc

import numpy as np

from ocrr.ledger import Ledger


def proc_status_mb() -> dict[str, float]:
    """Anonymous and file-backed resident memory now (MB), from /proc/self/status."""
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssFile"):
                    out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


class MemorySampler:
    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.peak = {"RssAnon": 0.0, "RssFile": 0.0}
        self._since_mark = dict(self.peak)
        self.phases: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ocrr-memory-sampler", daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> dict[str, float]:
        now = proc_status_mb()
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)
            self._since_mark[key] = max(self._since_mark[key], value)
        return now

    def mark(self, name: str) -> None:
        now = self.sample()
        self.phases[name] = {**now, "peak_anon": self._since_mark["RssAnon"], "peak_file": self._since_mark["RssFile"]}
        self._since_mark = dict(now)

    def fields(self) -> dict[str, float]:
        """CSV fields: the sampled peaks, and each phase's anonymous / file-backed MB at its
        end and their peaks during it (``peak_anon_mb_built``: during the IVF build)."""
        out = {"peak_anon_mb": self.peak["RssAnon"] or math.nan, "peak_file_mb": self.peak["RssFile"] or math.nan}
        for name, mem in self.phases.items():
            out[f"anon_mb_{name}"] = mem.get("RssAnon", math.nan)
            out[f"file_mb_{name}"] = mem.get("RssFile", math.nan)
            out[f"peak_anon_mb_{name}"] = mem["peak_anon"]
            out[f"peak_file_mb_{name}"] = mem["peak_file"]
        return out


def ledger_bytes_per_entry(dim: int = 384, n: int = 16_384) -> dict:
    """Measured (tracemalloc) bytes per entry of an ``ocrr.ledger.chain.Ledger`` with no texts.

    ``n`` is a power of two so the capacity-doubling vector buffer has no slack; returns
    {"total", "vector_buffer", "python_objects"} per entry. (Right after a doubling the
    buffer holds up to twice the live vectors: between 1x and 2x of ``4 * dim``.)
    """
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    labels = [f"c{i % 100:03d}" for i in range(n)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    led = Ledger(dim)
    led.extend(x, labels)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    buffer = led.vector_buffer_bytes / n
    del led
    total = (after - before) / n
    return {"total": total, "vector_buffer": buffer, "python_objects": total - buffer}
