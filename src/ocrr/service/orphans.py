"""Child processes that must not outlive their parent: ``die_with_parent``."""

from __future__ import annotations

import ctypes
import os
import sys

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent: int, signum: int) -> None:
    """Have the kernel send this process ``signum`` when its parent dies, however it dies
    (Linux's parent-death signal; elsewhere the caller needs another way to notice), and
    exit at once if ``parent``, the pid that started this process, has died already: the
    signal would never come for a death before it was set.

    Linux sends it when the *thread* that started this process ends: start such children
    from a thread that lives as long as the parent process (its main thread)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # a libc without prctl: the pid check below still covers the start
    if os.getppid() != parent:
        os._exit(1)
