"""A disk cache for expensive seed states that depend only on data and settings.

A seed state (a linear head trained on the seed set; river's seed pass over 3000 items,
which takes tens of seconds when river learns it itself rather than through
``river_mirror``) is identical for every correction policy of a (dataset, seed): a sweep
would redo it three times per cell, and a user re-running a cell would redo it each time.
The state is keyed by a digest of everything it depends on and stored under the user cache
(``<cache>/fitted``); loading it gives exactly the model a fresh fit would (tested).
Set OCRR_NO_FIT_CACHE=1 to bypass it.

Two processes asking for the same state (two sweep workers on two policies of one cell)
do not both compute it: the first takes an exclusive lock on ``<key>.lock``; the second
waits for the lock, then finds the finished file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
from collections.abc import Callable, Iterable
from typing import TypeVar

from ocrr.utils.files import atomic_write
from ocrr.utils.paths import cache_root

T = TypeVar("T")


def fit_key(parts: Iterable[bytes | str]) -> str:
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        raw = part.encode("utf-8") if isinstance(part, str) else bytes(part)
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest()


def cached_fit(kind: str, parts: Iterable[bytes | str], build: Callable[[], T]) -> T:
    """Load the state ``build()`` would produce for these key parts, or build and store it."""
    if os.environ.get("OCRR_NO_FIT_CACHE"):
        return build()
    path = cache_root() / "fitted" / kind / f"{fit_key(parts)}.pkl"
    state = _load(path)
    if state is not None:
        return state
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path.with_suffix(".lock")):
        state = _load(path)  # another process may have built it while this one waited
        if state is not None:
            return state
        state = build()

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(path, write)
    return state


def _load(path):
    if not path.exists():
        return None
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None  # torn or stale file: rebuild and overwrite


@contextlib.contextmanager
def _exclusive(lock_path):
    """An advisory lock held until the block ends (released by the OS if the process dies)."""
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
