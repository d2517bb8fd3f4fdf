"""Appends queued through ``submit`` (the service's way), for the tests of ledgers dropped or
closed while appends wait."""

from __future__ import annotations

import threading

import numpy as np


def submit_rows(led, n: int, dim: int) -> tuple[list, threading.Event]:
    """``n`` one-row appends (unit rows of ``dim``) through ``submit``, not waited for: what
    they are told, ``(ids, error)`` each, and an event set once all are."""
    told: list = []
    done = threading.Event()

    def tell(ids, err):
        told.append((ids, err))
        if len(told) == n:
            done.set()

    for i in range(n):
        led.submit(np.eye(dim, dtype=np.float32)[i % dim : i % dim + 1], [f"l{i}"], None, tell)
    return told, done
