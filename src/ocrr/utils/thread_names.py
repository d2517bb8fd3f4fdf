"""Threads named for the operating system, so ``top -H``, ``ps -L`` and ``/proc/<pid>/task``
show which of a service's threads uses the CPU (Python before 3.14 names only its own
``threading.Thread`` objects, and every OS thread shows the process's name)."""

from __future__ import annotations

import ctypes
import sys
import threading

__all__ = ["name_os_thread"]

_PR_SET_NAME = 15  # <linux/prctl.h>
_MAX_NAME = 15  # bytes the kernel keeps, beside the terminating NUL


def name_os_thread() -> None:
    """Give the calling thread's OS thread the name of its ``threading.Thread`` (cut to the
    15 bytes Linux keeps). Does nothing where there is no ``prctl`` (not Linux)."""
    if not sys.platform.startswith("linux"):
        return
    name = threading.current_thread().name.encode("utf-8", "replace")[:_MAX_NAME]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):  # a libc without prctl: the thread keeps the process's name
        pass
