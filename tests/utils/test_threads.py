"""Thread pinning: a FAISS loaded after the pin starts on one thread too (it is not imported
just to be limited), and a pinned block gives the previous settings back."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import os, sys
from ocrr.utils.threads import pinned_threads, pin_threads
assert "faiss" not in sys.modules
os.environ.pop("OMP_NUM_THREADS", None)
with pinned_threads(1):
    assert "faiss" not in sys.modules  # pinning does not import it
    import faiss
    inside = faiss.omp_get_max_threads()
after = faiss.omp_get_max_threads()
print(inside, after, "OMP_NUM_THREADS" in os.environ)
pin_threads(1)
print(os.environ["OMP_NUM_THREADS"], os.environ["OPENBLAS_NUM_THREADS"])
"""


def test_faiss_loaded_while_pinned_runs_on_one_thread_and_is_unpinned_after():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    first, second = done.stdout.splitlines()
    inside, after, variable_left = first.split()
    assert int(inside) == 1
    assert int(after) == os.cpu_count() and variable_left == "False"  # OpenMP's own default
    assert second == "1 1"
