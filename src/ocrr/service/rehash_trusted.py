"""The entries a quick open took on trust, rehashed in the background while the service serves.

``ocrr serve --quick-open`` reads the entries under the last signed checkpoint without
rehashing them (it reads them column by column), so that a large ledger comes up in seconds.
Storage is untrusted, so right after the start every one of those entries is rehashed from the
memory the service answers from (``ocrr.ledger.column_rehash``): with ``--workers N`` by the
supervisor, over the shared memory the workers map; with one process, by that process, over its
own rows. It runs in a thread scheduled only on otherwise idle CPU, resting between chunks:
requests keep the cores, and the pass ends sooner the less loaded the service is. An entry
that does not hash to its stored chain hash is damage, and the service fails closed
(``found``: recorded in the ledger file, which every worker honours within a second). Both
outcomes are logged and recorded (the review page shows the latest check).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from ocrr.ledger.column_rehash import HeldColumns, first_mismatch
from ocrr.ledger.location import StoredInnerNodes, record_verification_at

__all__ = ["RehashTrusted", "idle_priority", "recorded_in"]

_CHUNK = 4096  # entries rehashed between looks at the stop flag
# After each chunk the thread rests this many times as long as the chunk took (wall time, so
# longer while the service keeps the cores busy): at full speed, on idle CPU only, it still
# slowed the requests served meanwhile (docs/reproductions/service-at-scale.md, "The post-start rehash").
REST = 3.0
# The pass starts this long after the service does, unless ``ocrr serve --rehash-after`` says
# otherwise: run while the workers first touch their memory, it slowed the requests of those
# seconds most (docs/reproductions/service-at-scale.md).
WARM_UP = 10.0
_TRUSTED = "the quick open took on trust"
_FAILS_CLOSED = "the service fails closed: /health says why, predicts and corrections are refused"


class RehashTrusted:
    """Rehash ``columns``' first ``count`` entries in a thread of idle priority (``start``),
    ``after`` seconds from then, a chunk at a time with a rest after each (``rest`` times as
    long as the chunk took), then compare ``nodes`` (the stored inner Merkle nodes the open left
    unread, if any) the same way, and hand ``found`` the outcome (a verification report: ``ok``,
    ``size``, ``first_bad``, ``reason``, ``time``) and say it through ``log``."""

    def __init__(
        self,
        columns: HeldColumns,
        count: int,
        log: Callable[[str], None],
        found: Callable[[dict], None],
        rest: float = REST,
        after: float = WARM_UP,
        nodes: StoredInnerNodes | None = None,
    ) -> None:
        self.columns, self.count, self.log, self.found = columns, min(count, columns.size), log, found
        self.rest, self.after, self.nodes = rest, after, nodes
        self.done = 0  # entries rehashed so far
        self.first_bad: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ocrr-rehash-trusted", daemon=True)

    def start(self) -> RehashTrusted:
        self._thread.start()
        return self

    def stop(self, wait: float = 5.0) -> None:
        """Stop at the next chunk, waiting up to ``wait`` seconds for it (the columns it reads
        may be let go of once this returns)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._rehash()
        except Exception as e:  # noqa: BLE001 - the columns could not be read (no damage found): said, and the pass ends
            if not self._stop.is_set():
                self.log(f"the rehash of the entries the quick open took on trust stopped: {e}")

    def _rehash(self) -> None:
        idle_priority()
        if self._stop.wait(self.after):
            return
        started = time.monotonic()
        self.log(f"rehashing the {self.count:,} entries the quick open took on trust, on idle CPU, while serving")
        for lo in range(0, self.count, _CHUNK):
            began = time.monotonic()
            bad = first_mismatch(self.columns, lo, min(lo + _CHUNK, self.count))
            if bad is not None:
                self.first_bad = bad
                reason = (
                    f"entry {bad}: its fields do not hash to the chain hash stored for it (edited in storage; "
                    "found rehashing the entries the quick open took on trust)"
                )
                self.log(f"{reason}; {_FAILS_CLOSED}")
                self.found(_report(False, self.count, bad, reason))
                return
            self.done = min(lo + _CHUNK, self.count)
            if self._stop.wait(self.rest * (time.monotonic() - began)):
                return
        compared = ""
        if self.nodes is not None:
            for level, lo, hi in self.nodes.slices():
                began = time.monotonic()
                mismatch = self.nodes.first_mismatch(level, lo, hi)
                if mismatch is not None:
                    first, what = mismatch
                    reason = f"{what} (found comparing the stored Merkle nodes over the entries {_TRUSTED})"
                    self.log(f"{reason}; {_FAILS_CLOSED}")
                    self.found(_report(False, self.count, first, reason))
                    return
                if self._stop.wait(self.rest * (time.monotonic() - began)):
                    return
            compared = f", and the {self.nodes.count:,} stored Merkle nodes above them match"
        took = time.monotonic() - started
        self.log(
            f"the {self.count:,} entries the quick open took on trust are intact{compared}: checked in {took:.1f} s"
        )
        reason = (
            f"the {self.count:,} entries a quick open took on trust rehashed from the memory the service answers "
            f"from{compared}"
        )
        self.found(_report(True, self.count, None, reason))


def _report(ok: bool, size: int, first_bad: int | None, reason: str) -> dict:
    return {"ok": ok, "size": size, "first_bad": first_bad, "reason": reason, "time": time.time()}


def recorded_in(ledger: str | os.PathLike[str], log: Callable[[str], None]) -> Callable[[dict], None]:
    """``found`` for a process that does not hold the ledger open (the supervisor of
    ``--workers N``): the report recorded in the file, where every worker honours damage; damage
    that cannot be recorded there stops the service (fail closed), an intact outcome is only
    logged then."""

    def record(report: dict) -> None:
        try:
            record_verification_at(ledger, report)
        except Exception as e:  # noqa: BLE001 - a file that cannot be written
            if not report["ok"]:
                log(f"the damage cannot be recorded in the ledger ({e}), so the service stops")
                os.kill(os.getpid(), signal.SIGTERM)

    return record


def idle_priority() -> None:
    """Run the calling thread only when a core would otherwise idle (Linux ``SCHED_IDLE``; else
    the lowest priority its system gives a thread, if any)."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, 19)  # (Linux: one thread's nice value)
    except (AttributeError, OSError):
        pass
