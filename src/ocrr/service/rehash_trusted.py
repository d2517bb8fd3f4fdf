"""The entries a quick open took on trust, rehashed by the supervisor while the workers serve.

``ocrr serve --quick-open --workers N`` reads the entries under the last signed checkpoint
without rehashing them (``ocrr.ledger.sqlite.prefix``), so that a large ledger comes up in
seconds. Storage is untrusted, so once the workers have them the supervisor rehashes every one
of those entries from the shared memory the workers answer from (``ocrr.ledger.column_rehash``),
in a thread scheduled only on otherwise idle CPU: requests keep the cores, and the check ends
sooner the less loaded the service is. An entry that does not hash to its stored chain hash is
damage: it is recorded in the ledger file, which every worker honours within a second (read-only,
``/health`` 503: fail closed); if it cannot be recorded, the service stops. Both outcomes are
logged; an intact one is recorded too (the review page shows the latest check).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ocrr.ledger.column_rehash import HeldColumns, first_mismatch
from ocrr.ledger.sqlite.store import record_verification_in

__all__ = ["RehashTrusted"]

_CHUNK = 4096  # entries rehashed between looks at the stop flag


class RehashTrusted:
    """Rehash ``columns``' first ``count`` entries in a thread of idle priority (``start``);
    outcomes recorded in the ledger file at ``ledger`` (``record``) and said through ``log``."""

    def __init__(
        self,
        columns: HeldColumns,
        count: int,
        ledger: str | os.PathLike[str],
        log: Callable[[str], None],
        record: Callable[[Path, dict], None] = record_verification_in,
    ):
        self.columns, self.count, self.ledger = columns, min(count, columns.size), Path(ledger)
        self.log, self.record = log, record
        self.done = 0  # entries rehashed so far
        self.first_bad: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ocrr-rehash-trusted", daemon=True)

    def start(self) -> RehashTrusted:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        _idle_priority()
        started = time.monotonic()
        self.log(f"rehashing the {self.count:,} entries the quick open took on trust, on idle CPU, while serving")
        for lo in range(0, self.count, _CHUNK):
            if self._stop.is_set():
                return
            bad = first_mismatch(self.columns, lo, min(lo + _CHUNK, self.count))
            if bad is not None:
                self.first_bad = bad
                self._damage(bad)
                return
            self.done = min(lo + _CHUNK, self.count)
        took = time.monotonic() - started
        self.log(f"the {self.count:,} entries the quick open took on trust are intact: rehashed in {took:.1f} s")
        reason = (
            f"the {self.count:,} entries a quick open took on trust rehashed from the memory the workers answer from"
        )
        try:
            self.record(
                self.ledger, {"ok": True, "size": self.count, "first_bad": None, "reason": reason, "time": time.time()}
            )
        except Exception:  # noqa: BLE001 - a read-only file: the check still stands, and is logged
            pass

    def _damage(self, bad: int) -> None:
        reason = (
            f"entry {bad}: its fields do not hash to the chain hash stored for it (edited in storage; found "
            "rehashing the entries the quick open took on trust)"
        )
        try:
            self.record(
                self.ledger, {"ok": False, "size": self.count, "first_bad": bad, "reason": reason, "time": time.time()}
            )
        except Exception as e:  # noqa: BLE001 - the workers cannot be told: stop them all (fail closed)
            self.log(f"{reason}; it cannot be recorded in the ledger ({e}), so the service stops")
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.log(f"{reason}; recorded in the ledger: every worker now refuses corrections and /health says why")


def _idle_priority() -> None:
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
