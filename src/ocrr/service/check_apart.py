"""The quick check of a whole ledger file, run in a process of its own on idle CPU.

Once per cycle of its rolling rehash, a worker's background check reads the whole file (every
entry's stored columns, the tree rebuilt from the stored leaves and compared with the stored
nodes). Run in the worker, that read holds the interpreter lock the worker's requests need
for as long as it lasts, seconds at a million entries, so a file's check runs in a child
process instead, scheduled only on otherwise idle CPU (``python -m ocrr.service.check_apart``:
the file and its verifier keys as JSON on stdin, the report as JSON on stdout). The worker
waits for the report and compares it with what it holds, as before. A database's check is
mostly waiting on the server, and stays in the worker.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys

from ocrr.errors import OcrrError
from ocrr.ledger.location import is_database_url, scan_location
from ocrr.ledger.scan import LedgerReport
from ocrr.ledger.store import LedgerStore
from ocrr.service.rehash_trusted import idle_priority

__all__ = ["quick_check"]

_PR_SET_PDEATHSIG = 1  # Linux prctl: a signal the child gets when the thread that started it ends


def quick_check(led: LedgerStore) -> LedgerReport:
    """The quick check of ``led`` as stored now (``verify="checkpoint"``, the report only): for
    a file, in a child process on idle CPU; for a database, here."""
    if is_database_url(str(led.path)):
        return led.scan("checkpoint", rows=False)[0]
    request = json.dumps({"path": os.fspath(led.path), "vkeys": list(led.vkeys)})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ocrr.service.check_apart"],
            input=request.encode(),
            capture_output=True,
            check=False,
        )
    except OSError as e:  # no process could be started (out of memory or process slots)
        raise OcrrError(f"the check of the whole file could not start a process ({e})") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise OcrrError(
            f"the check of the whole file ended with status {done.returncode}" + (f": {said[-1]}" if said else "")
        )
    try:
        found = json.loads(done.stdout)
        return LedgerReport(**{**found, "ignored_why": tuple(found["ignored_why"])})
    except (ValueError, TypeError, KeyError) as e:
        raise OcrrError(f"the check of the whole file gave no report ({e})") from None


def _end_with_parent() -> None:
    """Be killed if the worker's thread that started this process ends (a stopped service
    leaves no read of a large file running); Linux only, elsewhere the check runs to its end."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main() -> int:
    parent = os.getppid()
    _end_with_parent()
    if os.getppid() != parent:  # the worker ended before the line above took effect
        return 1
    idle_priority()
    asked = json.load(sys.stdin)
    try:
        report, _ = scan_location(asked["path"], "checkpoint", tuple(asked["vkeys"]), rows=False)
    except OcrrError as e:  # (the file gone, say): the worker's message, not a traceback
        print(e, file=sys.stderr)
        return 2
    json.dump(report.to_dict(), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
