"""Start the fork server that sweep and run workers are forked from, before anything heavy loads.

A worker imports numpy, the systems and torch before its first task, which takes longer
than many tasks (docs/reference/measurements.md). The fork server (multiprocessing's
``forkserver`` start method) imports them once, while the command does its own imports,
and every worker forked from it starts with them loaded. This module imports nothing of
ocrr's, so a command can start the server first thing, and the engine and the CLI's other
modules (pandas, the protocols) load meanwhile.
"""

from __future__ import annotations

import multiprocessing as mp
import os

#: What a worker imports to run any task. The fork server imports them once, and every worker
#: forked from it starts with them loaded (torch is the slowest of them to import; the
#: systems import it only when a head is built, so it is named here).
WORKER_MODULES = ("ocrr.engine.sweep.execute", "ocrr.systems", "ocrr.systems.heads.linear", "torch", "ocrr.protocols")
_PINNED_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def start_fork_server() -> bool:
    """Start the fork server now, importing ``WORKER_MODULES``, so that it loads them while
    this process does its own imports. Its thread pools are pinned to one thread from the
    start (the workers pin theirs again), so nothing forked from it holds an idle pool.
    False where there is no fork server (the workers are then spawned as before)."""
    if "forkserver" not in mp.get_all_start_methods():
        return False
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(list(WORKER_MODULES))
    saved = {key: os.environ.get(key) for key in _PINNED_ENV}
    os.environ.update(dict.fromkeys(_PINNED_ENV, "1"))
    try:
        forkserver.ensure_running()  # the server inherits this environment
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return True
