"""release_free_heap and map_allocations_from keep freed memory out of the resident size; live data stays."""

from __future__ import annotations

import sys

import pytest


def _anon_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


# Each case in a fresh process: malloc's settings are process-wide, and another test (or the
# scale study's worker) may have changed them. 96 KB blocks are below glibc's default 128 KB
# map threshold, so by default they come from the heap; freeing every other one leaves holes.
_HOLES = """
import numpy as np, sys
from ocrr.utils.heap import map_allocations_from, release_free_heap
from tests.utils.test_heap import _anon_mb
if sys.argv[1] == "mapped":
    assert map_allocations_from(64 << 10)
blocks = [np.ones(24_576, np.float32) for _ in range(2_000)]  # 188 MB, every page touched
before = _anon_mb()
for i in range(0, len(blocks), 2):
    blocks[i] = None
freed = before - _anon_mb()
assert release_free_heap()
kept = [b for b in blocks if b is not None]
assert len(kept) == 1_000 and all(float(b.sum()) == 24_576.0 for b in kept)  # live data untouched
print(freed, before - _anon_mb())
"""


def _freed_mb(mode: str) -> tuple[float, float]:
    """MB returned when the holes were freed, and after ``release_free_heap`` too."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _HOLES, mode], cwd=root, capture_output=True, text=True, check=True)
    freed, trimmed = proc.stdout.split()
    return float(freed), float(trimmed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and mallopt")
def test_holes_in_the_heap_stay_resident_until_released_or_mapped():
    # 1,000 freed 96 KB blocks = 94 MB
    heap_freed, heap_trimmed = _freed_mb("heap")
    assert heap_freed < 20  # kept by malloc: the top of the heap is still in use
    assert heap_trimmed > 80  # handed back by release_free_heap
    mapped_freed, _ = _freed_mb("mapped")
    assert mapped_freed > 80  # each block was its own map: returned as it was freed


def test_a_threshold_below_one_byte_is_refused():
    from ocrr.utils.heap import map_allocations_from

    with pytest.raises(ValueError, match="nbytes must be >= 1"):
        map_allocations_from(0)
