"""``ocrr serve --workers N``: N processes answering on one port, over one ledger file.

One Python process answers at most what one GIL allows (docs/service.md, "Figures": the
standard mix on one worker), so on a box with more cores the service runs N workers, each
a full copy of the app with its own substrate and its own SQLite connection to the same
ledger file. The kernel hands each new connection to one of them (each listens on its own
socket of that port), and a worker holding more than its share hands it on to the
least-loaded one (``balance.py``). They agree on the ledger: a worker's commit first takes
in, checked, what the others committed, and every predict, head and proof first takes in
what is new (``LedgerStore.refresh``), so any worker answers for every correction
acknowledged before the request arrived, whichever worker acknowledged it.

The ``ocrr serve`` process checks the ledger once, fully, and seeds it if asked, before
any worker starts (``server.serve``); workers then open it from that checkpoint. The
supervisor (``supervise``, in that process) restarts a worker that dies, waiting longer
after each death in a row (``Backoff``), and on SIGTERM / SIGINT stops them all the way
uvicorn stops (requests in flight are answered, commits in flight land), then exits.

One service per ledger and per port (``claim``): the supervisor holds, for its life, an
exclusive lock on ``<ledger>.serve-lock`` (not the ledger's ``-writer`` lock, which the
workers share to append), one on the ledger file itself, whatever name it is reached by
(``ocrr.ledger.location.claim_service``: a bind mount or a hard link is no second ledger), and one on
the port, and first binds the port without SO_REUSEPORT, so a port some other process
listens on is refused rather than shared.
Workers never outlive their supervisor (``_worker_main``): on Linux the kernel sends them
SIGTERM when it dies (the parent-death signal), and each also watches a pipe whose only
writer is the supervisor: end of file there means it died, even by SIGKILL.
"""

from __future__ import annotations

import errno
import fcntl
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

from ocrr.errors import OcrrError, SettingsError
from ocrr.ledger.location import FileHold, claim_service, is_database_url
from ocrr.service.balance import Mesh
from ocrr.service.metrics import MAX_ROUTES, Counters
from ocrr.service.orphans import die_with_parent

ORPHAN_GRACE = 5.0  # seconds a worker whose supervisor died has to stop gracefully, then it exits
SETTINGS_REFUSED = 78  # a worker's exit status for a SettingsError (sysexits' EX_CONFIG): restarting cannot help


def bind(host: str, port: int, listen: bool) -> socket.socket:
    """A socket on (host, port) that other sockets of this user may share (SO_REUSEPORT).
    The supervisor binds one without listening, to claim the port; each worker listens on
    its own, and the kernel spreads new connections over the listening ones by a hash of
    their addresses (one shared socket would hand most of them to whichever worker wakes
    first; ``balance.py`` evens out what the hash leaves uneven). Call ``claim`` first: it
    makes sure no other process is on the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


# -- one service per ledger and per port ----------------------------------------------------


@dataclass
class Claim:
    """What one ``ocrr serve`` holds for its life (``claim``): its ledger's serve lock and its
    port's lock. ``port``: the port found free (the one chosen when asked for port 0)."""

    port: int
    lock_path: Path | None  # None: a database ledger, which replicas share
    _fd: int
    _port_lock: socket.socket | None = None
    _closed: list[bool] = field(default_factory=list)
    _file: FileHold | None = None  # the ledger file itself, held as its one service (any name)
    # The ledger file and the files beside it that did not exist before this start, which a
    # refused start removes (``remove_new_files``): files that existed are never touched.
    new_files: tuple[Path, ...] = ()

    def remove_new_files(self) -> None:
        """Remove what this start made of the ledger (``new_files``): for a start refused before
        it served anything, so that a refusal leaves nothing behind. Closed by then: the store
        closes its files when its open or the start fails."""
        for path in self.new_files:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass  # (a folder made read-only meanwhile: what is left is an empty ledger)

    def close(self) -> None:
        if self._closed:
            return
        self._closed.append(True)
        if self.lock_path is not None:
            try:
                self.lock_path.unlink()  # while still locked: whoever opens it next makes a new one
            except OSError:
                pass
            os.close(self._fd)
        if self._file is not None:
            self._file.release()
        if self._port_lock is not None:
            self._port_lock.close()

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def claim(ledger: str | os.PathLike[str], host: str, port: int) -> Claim:
    """Refuse, with the fix, to serve a ledger another ``ocrr serve`` serves, or a port another
    process listens on; else hold both until ``Claim.close``. A ledger in a database
    (``postgresql://…``) is not claimed: any number of replicas serve it."""
    if is_database_url(ledger):
        port_lock = _lock_port(host, port) if port else None
        port = _probe(host, port)
        if port_lock is None and port:
            port_lock = _lock_port(host, port)
        return Claim(port, None, -1, port_lock)
    ledger = Path(ledger).expanduser()
    if not ledger.parent.is_dir():
        raise OcrrError(f"cannot create ledger {ledger}: directory {ledger.parent} does not exist; create it first")
    real = ledger.resolve()
    lock_path = real.with_name(real.name + ".serve-lock")
    fd = _lock_file(lock_path, ledger)  # through this name, with the holder's pid for the message
    created = not real.exists()
    # What a new ledger brings with it (SQLite's logs, the writers' lock file, a generated token),
    # unless left by an earlier file of that name: under the lock, so no other service makes them.
    beside = (f"{real}{suffix}" for suffix in ("-journal", "-wal", "-shm", "-writer", ".token"))
    new_files = (real, *(Path(p) for p in beside if not os.path.lexists(p))) if created else ()
    served: FileHold | None = None
    try:
        served = claim_service(real)  # through any name (ocrr.ledger.location.claim_service)
        port_lock = _lock_port(host, port) if port else None
        port = _probe(host, port)
        if port_lock is None and port:
            port_lock = _lock_port(host, port)
    except BaseException:
        if served is not None:
            served.release()
        if created and real.exists() and real.stat().st_size == 0:
            real.unlink()  # made only to be locked: a refusal leaves nothing
        os.unlink(lock_path)
        os.close(fd)
        raise
    return Claim(port, lock_path, fd, port_lock, _file=served, new_files=new_files)


def _lock_file(path: Path, ledger: Path) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise OcrrError(
                f"cannot create the lock file {path} ({e.strerror}); the ledger's folder must be writable"
            ) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise OcrrError(
                f"ledger {ledger} is already served by another `ocrr serve` (pid {holder}); stop that one "
                "first, or serve another ledger file"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else its holder removed it as we opened it: take the new one
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)


def _lock_port(host: str, port: int) -> socket.socket | None:
    """A name in Linux's abstract socket namespace, held while serving (released by the
    kernel however the process ends): closes the gap between ``_probe`` and the workers'
    binding, where two services starting at once would both find the port free."""
    if not sys.platform.startswith("linux"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0ocrr-serve:{os.getuid()}:{host}:{port}")
    except OSError as e:
        sock.close()
        if e.errno != errno.EADDRINUSE:
            return None
        raise OcrrError(
            f"{host}:{port} is already served by another `ocrr serve`; stop that one first, or pick another --port"
        ) from None
    return sock


def _probe(host: str, port: int) -> int:
    """Bind (host, port) without SO_REUSEPORT, and let go: fails if any process listens there,
    even one that would share it (an ``ocrr serve`` worker). Returns the port bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past connections in TIME_WAIT do not count
            sock.bind((host, port))
            return int(sock.getsockname()[1])
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise OcrrError(
                f"cannot listen on {host}:{port}: another process listens there already; stop it, or pick "
                "another --port or --host"
            ) from e
        raise OcrrError(f"cannot listen on {host}:{port} ({e.strerror}); pick another --port or --host") from e


# -- the workers ----------------------------------------------------------------------------


@dataclass
class Backoff:
    """When to start a worker again: ``first`` seconds after a death, doubling with each
    death in a row up to ``cap``; a worker that stayed up ``steady`` seconds starts the row
    afresh. After ``give_up`` failed starts in a row, the service stops."""

    first: float = 0.5
    cap: float = 30.0
    steady: float = 60.0
    give_up: int = 5

    def delay(self, failures: int) -> float:
        return min(self.cap, self.first * 2 ** (failures - 1))


def supervise(
    workers: int,
    sock: socket.socket,
    target: Callable,
    config: Any,
    log: Callable[[str], None],
    backoff: Backoff | None = None,
    balanced: bool = False,
    prepare: Callable[[], Any] | None = None,
) -> int:
    """Run ``target(config, slot, workers, table)`` in ``workers`` processes until a
    signal asks to stop; restart any that dies meanwhile (``backoff``). ``balanced``: the
    target also gets a ``balance.Mesh`` (connections balanced over the workers).
    ``prepare``: called once the workers are started (they start up meanwhile, not after
    it); the target also gets ``handoff``, a connection on which its result comes, to each
    worker started before or after it returns; if it raises, the workers are stopped and
    its exception raised here (a signal meanwhile acts as it would without workers).
    Returns the exit status: 0 when stopped by a signal, 1 when a worker kept failing."""
    backoff = backoff or Backoff()
    ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited threads or locks
    table = ctx.RawArray("d", workers * Counters.width(MAX_ROUTES))
    mesh = Mesh.create(ctx, workers) if balanced else None
    watch, alive = ctx.Pipe(duplex=False)  # nothing is written to `alive`: its end tells a worker we died
    errors_in, errors = ctx.Pipe(duplex=False)  # a failing worker's one-line error
    procs: dict[int, SpawnProcess] = {}
    started: dict[int, float] = {}
    failures: dict[int, int] = dict.fromkeys(range(workers), 0)
    due: dict[int, float] = {}  # slot -> when to start it again
    last_error: dict[int, str] = {}
    stopping: list[int] = []
    me = os.getpid()
    prepared: list[Any] = []  # prepare's result, once it returned
    waiting: dict[int, Connection] = {}  # slot -> where its worker waits for that result

    def start(slot: int) -> None:
        handed, hand = ctx.Pipe(duplex=False) if prepare is not None else (None, None)
        proc = ctx.Process(
            target=_worker_main,
            args=(target, watch, errors, me, config, slot, workers, table, *([mesh] if mesh else [])),
            kwargs={} if handed is None else {"handoff": handed},
            name=f"ocrr-worker-{slot}",
        )
        proc.start()
        procs[slot], started[slot] = proc, time.monotonic()
        if handed is not None and hand is not None:
            handed.close()  # the worker's end
            waiting[slot] = hand
            hand_over()

    def hand_over() -> None:
        if not prepared:
            return
        for slot, hand in list(waiting.items()):
            del waiting[slot]
            try:
                hand.send(prepared[0])
            except OSError:
                pass  # it died meanwhile: restarted as any other, and handed it then
            hand.close()

    def stop(signum, frame) -> None:
        stopping.append(signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for slot in range(workers):
            start(slot)
        if prepare is not None:
            for s, handler in old.items():  # meanwhile, a signal stops this process as it would anyway
                signal.signal(s, handler)
            prepared.append(prepare())  # (in this thread: a check's freed heap goes back to the system)
            for s in old:
                signal.signal(s, stop)
            hand_over()
        while not stopping:
            now = time.monotonic()
            timeout = min([0.5, *(max(0.0, t - now) for t in due.values())])
            wait([p.sentinel for p in procs.values()] + [errors_in], timeout=timeout)
            while errors_in.poll():
                slot, message = errors_in.recv()
                last_error[slot] = message
            now = time.monotonic()
            for slot, proc in list(procs.items()):
                if proc.exitcode is None or stopping:
                    continue
                del procs[slot]
                if mesh is not None:
                    mesh.gone(slot)
                if now - started[slot] >= backoff.steady:
                    failures[slot] = 0
                failures[slot] += 1
                cause = last_error.pop(slot, None) or f"exit status {proc.exitcode}"
                if proc.exitcode == SETTINGS_REFUSED:
                    log(f"worker {slot} cannot start with these settings: {cause}; stopping the service")
                    stopping.append(0)
                    break
                if failures[slot] >= backoff.give_up:
                    log(
                        f"worker {slot} failed {failures[slot]} times in a row, last: {cause}; stopping the "
                        "service: fix the cause, then start it again"
                    )
                    stopping.append(0)
                    break
                delay = backoff.delay(failures[slot])
                log(f"worker {slot} stopped ({cause}); starting it again in {delay:g} s")
                due[slot] = now + delay
            for slot, when in list(due.items()):
                if when <= now and not stopping:
                    del due[slot]
                    start(slot)
    finally:
        for proc in procs.values():
            if proc.is_alive():
                proc.terminate()  # SIGTERM: uvicorn's graceful stop, then the ledger closes
        for proc in procs.values():
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        for s, handler in old.items():
            signal.signal(s, handler)
        for conn in (watch, alive, errors_in, errors, *waiting.values()):
            conn.close()
        if mesh is not None:
            mesh.close()
        sock.close()
    return 1 if stopping and stopping[0] == 0 else 0


def _worker_main(
    target: Callable, watch: Connection, errors: Connection, supervisor: int, config: Any, slot: int, *args, **kwargs
) -> None:
    """A worker process: bound to its supervisor's life, then ``target``. An ``OcrrError``
    (a damaged ledger, say) ends it with one line, which the supervisor also gets."""
    _die_with(supervisor, watch)
    try:
        target(config, slot, *args, **kwargs)
    except SettingsError as e:  # every try would end so: the supervisor stops at once
        _fail(errors, slot, str(e))
        sys.exit(SETTINGS_REFUSED)
    except OcrrError as e:
        _fail(errors, slot, str(e))
        sys.exit(2)
    except Exception as e:  # a bug: its traceback here, one line for the supervisor
        traceback.print_exc()
        _fail(errors, slot, f"{type(e).__name__}: {e}")
        sys.exit(1)


def _fail(errors: Connection, slot: int, message: str) -> None:
    print(f"[worker {slot}] error: {message}", file=sys.stderr, flush=True)
    try:
        errors.send((slot, message[:2000]))  # small: one atomic write, whatever the other workers send
    except OSError:
        pass  # the supervisor is gone


def _die_with(supervisor: int, watch: Connection) -> None:
    """Stop this process when the supervisor dies: the kernel's parent-death signal (Linux),
    and a thread that waits for end of file on ``watch`` (any system; SIGTERM, then, if the
    graceful stop takes longer than ORPHAN_GRACE seconds, exit)."""
    die_with_parent(supervisor, signal.SIGTERM)  # the watchdog below holds where the signal does not

    def watchdog() -> None:
        try:
            watch.poll(None)  # returns only at end of file: nothing is ever written
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(ORPHAN_GRACE)
        os._exit(1)

    threading.Thread(target=watchdog, name="ocrr-supervisor-watchdog", daemon=True).start()
