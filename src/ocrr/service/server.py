"""Running the service: ``serve(config)`` answers in this process, or in ``config.workers``
worker processes under a supervisor (``supervisor.py``), until SIGTERM / SIGINT."""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import functools
import gc
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection

import uvicorn

from ocrr.errors import OcrrError
from ocrr.ledger.location import StoredInnerNodes, default_origin_of, display, scan_location
from ocrr.service.app import create_app
from ocrr.service.balance import Balancer, Mesh, balanced_protocol
from ocrr.service.config import ServiceConfig, check_tls_files
from ocrr.service.header_timeout import header_deadline_protocol
from ocrr.service.hosts import AllowedHosts, allowed_hosts
from ocrr.service.limits import BodyLimit
from ocrr.service.rehash_trusted import RehashTrusted, recorded_in
from ocrr.service.shared_rows import SharedRows, publish, room_for_rows
from ocrr.service.state import build_state, load_signer
from ocrr.service.supervisor import Claim, bind, claim, supervise
from ocrr.service.threads import limit_threads, pin_to_core
from ocrr.systems.substrate.persistent import PersistentSubstrate

# Seconds a stopping server gives the requests in flight (ledger commits take milliseconds).
# uvicorn otherwise waits for every connection to close, and with TLS an idle keep-alive
# connection closes only when the client answers the close_notify, or after asyncio's 30 s.
STOP_GRACE_S = 3


class _QuietIdleCancel(logging.Filter):
    """Drop uvicorn's "Cancel 0 running task(s)" error: with no request in flight the grace
    period ended on idle connections only, which is the normal way to stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("Cancel %s running task(s)") and record.args == (0,))


logging.getLogger("uvicorn.error").addFilter(_QuietIdleCancel())


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def serve(config: ServiceConfig, log: Callable[[str], None] = _to_stderr) -> int:
    """Open the ledger (checked fully, or from its checkpoint with ``quick_open``), seed it
    if asked, then answer until stopped. Returns the exit status."""
    # The one check of the TLS files (``ocrr serve`` relies on it too): before anything is
    # written or printed.
    if config.tls_cert is not None and config.tls_key is not None:
        check_tls_files(config.tls_cert, config.tls_key)
    load_signer(config)  # likewise the signing key (loaded again as the ledger opens)
    # One service per ledger and per port: refused here, before the ledger is read.
    with claim(config.ledger, config.host, config.port) as claimed:
        return _serve(config, claimed, log)


@contextmanager
def _removed_if_refused(claimed: Claim) -> Iterator[None]:
    """A start refused in this block (a ledger that does not open, an encoder that does not
    load or fit it, a dataset that does not seed it) leaves behind no ledger it made
    (``Claim.remove_new_files``). Only around what comes before anything is served."""
    try:
        yield
    except BaseException:
        claimed.remove_new_files()
        raise


def _serve(config: ServiceConfig, claimed: Claim, log: Callable[[str], None]) -> int:
    port = claimed.port
    if config.workers > 1 and config.fit is None:
        return _serve_workers(dataclasses.replace(config, port=port), log, claimed)
    with _removed_if_refused(claimed):
        state = build_state(config, log=log)
    log(_opened(config, state.substrate))
    if config.workers > 1:  # (seeded here first: --fit)
        token, damage_seen = state.token, state.damage_seen
        handed = Handoff(token, damage_seen, None if config.on_database else publish(state.substrate))
        state.close()
        del state
        gc.collect()  # (some are in reference cycles)
        return _serve_workers(dataclasses.replace(config, token=token, port=port), log, claimed, lambda: handed)
    limit_threads()
    base = _base_url(config, port)  # the port claimed: a free one for --port 0
    log(f"review page: {base}/   API: {base}/docs")
    close = state.close

    def close_and_say() -> None:  # runs at shutdown, after the requests in flight
        close()
        log(f"stopped: ledger {display(config.ledger)} closed at {len(state.substrate)} entries")

    state.close = close_and_say
    uv = uvicorn.Config(
        outer_app(create_app(state, freeze_heap=True), config),
        host=config.host,
        port=port,
        log_level="warning",
        access_log=False,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    with_header_deadline(uv, config)
    # uvicorn stops on Ctrl-C / SIGTERM gracefully, then re-raises the signal (exit status -2 / -15).
    server = uvicorn.Server(uv)
    try:
        server.run()
    except KeyboardInterrupt:  # as uvicorn.run
        pass
    if not server.started:  # as uvicorn.run: the port could not be bound, or the app did not start
        return 3
    return 0


def outer_app(app, config: ServiceConfig):
    """What uvicorn serves: ``app`` behind the ``Host`` check (``hosts.py``), then the body limit."""
    return AllowedHosts(BodyLimit(app), allowed_hosts(config.allowed_hosts, config.host))  # as the config made it


def with_header_deadline(uv: uvicorn.Config, config: ServiceConfig) -> None:
    """Make ``uv``'s HTTP protocol close connections slow to send headers (``header_timeout.py``)."""
    if not uv.loaded:
        uv.load()  # resolves the HTTP protocol class (h11's or httptools')
    uv.http_protocol_class = header_deadline_protocol(uv.http_protocol_class, config.header_timeout)


def _base_url(config: ServiceConfig, port: int) -> str:
    """The URL the service answers on (https with --tls-cert)."""
    return f"{'https' if config.tls_cert else 'http'}://{config.host}:{port}"


@dataclass(frozen=True)
class Handoff:
    """What the supervisor of ``--workers N`` hands each worker once it checked the ledger:
    the service's token, the latest verification record when it started (damage recorded
    after it is honoured, also by a worker started later), and the entries it checked, in
    shared memory (``shared_rows.py``; None: the worker reads them from the ledger), and how
    many of those it took on trust (a quick open's, rehashed afterwards: ``rehash_trusted.py``)."""

    token: str
    damage_after: int
    shared: SharedRows | None
    trusted: int = 0  # entries the check did not rehash (a quick open's): the supervisor rehashes them


def _opened(config: ServiceConfig, substrate: PersistentSubstrate) -> str:
    """The line said once the ledger is checked; for a quick open that no checkpoint record
    let skip rehashing (at ten million entries: minutes more), why, so that the next start is quick."""
    said = f"ledger {display(config.ledger)}: {len(substrate)} entries, verified"
    report = substrate.ledger.report
    if config.verify != "checkpoint" or config.key is None or not len(substrate) or report.checked_from:
        return said
    if not report.ignored_why:
        return (
            f"{said}; --quick-open rehashed every entry, as it holds no checkpoint record yet: one is "
            "recorded now, signed by --key, so the next --quick-open starts from it"
        )
    signer = load_signer(config)
    origin = signer.origin if signer is not None else default_origin_of(config.ledger)
    return (
        f"{said}; --quick-open rehashed every entry, as none of its checkpoint records is signed by --key "
        f"under the origin {origin} ({report.ignored_why[0]}): check --key and --origin against the ones "
        "the ledger was served with"
    )


def _check_for_workers(config: ServiceConfig, log: Callable[[str], None], claimed: Claim) -> Handoff:
    """Check the ledger once, fully or from its checkpoint, as the workers start (each loads
    its own encoder), and write what it read into memory they share: they then read from the
    file only what follows it."""
    first = dataclasses.replace(config, encoder=None, encoder_nice=None)
    room = None if config.on_database else room_for_rows(config.ledger)  # the rows are read into it
    rows_mapping = None if room is None else room.buffer
    try:
        with _removed_if_refused(claimed):  # (the workers wait for this check: none has opened the ledger)
            state = build_state(first, log=log, predicts=False, shared=room)  # the substrate is the workers'
        try:
            log(_opened(config, state.substrate))
            shared = None if config.on_database else publish(state.substrate, room)
            trusted = state.substrate.ledger.report.checked_from
        finally:
            state.close()
    finally:
        if room is not None:
            room.close()
    handed = Handoff(state.token, state.damage_seen, shared, trusted if shared is not None else 0)
    del state  # the checked entries it holds are freed, not kept for the service's life
    gc.collect()  # (some are in reference cycles)
    _trim_heap()  # (glibc keeps some of a helper thread's freed heap otherwise)
    # This process's mapping of the shared rows goes in a thread of its own, while the workers
    # are handed them: unmapping that many pages takes a while and frees no memory (the
    # memory file holds them).
    if rows_mapping is not None:
        held = [rows_mapping]
        del rows_mapping
        threading.Thread(target=held.clear, name="ocrr-unmap", daemon=True).start()  # (the last reference)
    return handed


def _trim_heap() -> None:
    """Give the memory this process freed back to the system (glibc's ``malloc_trim``)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _serve_workers(
    config: ServiceConfig, log: Callable[[str], None], claimed: Claim, prepare: Callable[[], Handoff] | None = None
) -> int:
    """``--workers N``: N worker processes answer on one socket. They start at once, while
    this process checks the ledger (``prepare``, by default ``_check_for_workers``), and each
    opens it from what that check hands it (``Handoff``)."""
    prepare = prepare or functools.partial(_check_for_workers, config, log, claimed)
    handed: list[Handoff] = []
    rehashing: list[RehashTrusted] = []

    def prepared() -> Handoff:
        handed.append(prepare())
        base = _base_url(config, port)  # said once the ledger is checked
        log(f"review page: {base}/   API: {base}/docs ({config.workers} worker processes)")
        shared, trusted = handed[-1].shared, handed[-1].trusted
        if shared is not None and trusted:
            found = recorded_in(config.ledger, log)
            # (the supervisor's open left the stored inner nodes under the checkpoint to this pass)
            nodes = StoredInnerNodes(config.ledger, shared.held_levels(), trusted)
            job = RehashTrusted(shared.held_columns(), trusted, log, found, after=config.rehash_delay, nodes=nodes)
            rehashing.append(job.start())
        return handed[-1]

    try:
        with _removed_if_refused(claimed):
            sock = bind(config.host, config.port, listen=False)  # holds the port; the workers listen on it
    except OSError as e:
        raise OcrrError(
            f"cannot listen on {config.host}:{config.port} ({e.strerror}); pick another --port or --host"
        ) from e
    port = sock.getsockname()[1]  # the one bound (--port 0: a free one)
    worker = dataclasses.replace(config, port=port, fit=None, data_dir=None, quick_open=True)
    try:
        status = supervise(
            config.workers,
            sock,
            worker_main,
            worker,
            log,
            balanced=not config.tls_cert,  # a TLS connection cannot move once its handshake is done
            prepare=prepared,
        )
    finally:
        for r in rehashing:
            r.stop()
        for h in handed:
            if h.shared is not None:
                h.shared.close()
    log(f"stopped: {config.workers} workers, ledger {display(config.ledger)} closed")
    return status


def worker_main(
    config: ServiceConfig,
    slot: int,
    workers: int,
    table,
    mesh: Mesh | None = None,
    damage_after: int = -1,
    shared: SharedRows | None = None,
    handoff: Connection | None = None,
) -> None:
    """One worker: open the ledger (from the supervisor's checkpoint), build the app, and
    serve on its own socket of the shared port until SIGTERM. ``mesh``: connections are
    balanced over the workers through it (``balance.py``). ``damage_after``: the latest
    verification record when the service started (damage recorded after it is honoured).
    ``shared``: the entries the supervisor checked (``shared_rows.py``). ``handoff``: where
    the supervisor sends, once its check is done, a ``Handoff`` giving the token and these
    two (the worker waits for it before it opens anything)."""
    log = lambda msg: print(f"[worker {slot}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    os.setpgrp()  # a terminal's Ctrl-C reaches the supervisor only, which then stops each worker once
    if handoff is not None:
        try:
            handed: Handoff = handoff.recv()
        except EOFError:
            return  # the supervisor stopped before its check was done
        finally:
            handoff.close()
        config = dataclasses.replace(config, token=handed.token)
        damage_after, shared = handed.damage_after, handed.shared
    try:
        state = build_state(config, log=log, damage_after=damage_after, shared=shared)
    except OcrrError:
        # Opened from the checkpoint, a file changed since says only that it does not match: say what is wrong.
        report, _ = scan_location(config.ledger)
        if not report:
            where = "" if report.first_bad is None else f" at entry {report.first_bad}"
            shown = display(config.ledger)
            raise OcrrError(
                f"ledger {shown} is damaged{where}: {report.reason}; this worker will not serve it. "
                f"Stop the service and restore the file from a backup (`ocrr ledger verify {shown}` "
                "gives the report)"
            ) from None
        raise
    finally:
        if shared is not None:
            shared.close()  # this process's descriptor: its mappings stay
    state.slot, state.workers, state.shared = slot, workers, table
    if config.pin_workers:  # before the request threads start: they inherit the core (the encoder, started, does not)
        log(f"on core {pin_to_core(slot)}")
    limit_threads()
    app = outer_app(create_app(state, freeze_heap=True), config)
    uv = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    with_header_deadline(uv, config)  # also the class _BalancedServer wraps
    if mesh is not None:
        if not can_hand_over(uv.http_protocol_class):
            log(
                f"uvicorn {uvicorn.__version__}'s HTTP protocol does not take the arguments this ocrr "
                "passes to serve a handed-over connection: connections keep the kernel's spread "
                "(install the uvicorn version ocrr's tests ran with to balance them)"
            )
            mesh = None
    server = uvicorn.Server(uv) if mesh is None else _BalancedServer(uv, Balancer(mesh, slot))
    server.run(sockets=[bind(config.host, config.port, listen=True)])


def can_hand_over(protocol_class: type) -> bool:
    """Whether uvicorn's HTTP protocol class is made as ``_BalancedServer`` makes one for a
    handed-over connection: uvicorn makes it internally, with keywords that are not a
    public API, so another uvicorn may change them."""
    try:
        params = inspect.signature(protocol_class).parameters  # the class: its __init__ without self
    except (TypeError, ValueError):
        return False
    return {"config", "server_state", "app_state"} <= params.keys()


class _BalancedServer(uvicorn.Server):
    """uvicorn's server, its connections balanced over the workers (``balance.py``)."""

    def __init__(self, config: uvicorn.Config, balancer: Balancer):
        if not config.loaded:  # resolves the HTTP protocol class, which is then wrapped
            config.load()
        self.protocol = balanced_protocol(config.http_protocol_class, balancer)
        config.http_protocol_class = self.protocol
        super().__init__(config)
        self.balancer = balancer

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.balancer.serve(
                asyncio.get_running_loop(),
                lambda sender: self.protocol(
                    config=self.config, server_state=self.server_state, app_state=self.lifespan.state, sender=sender
                ),
            )

    async def shutdown(self, sockets=None) -> None:
        self.balancer.stop()
        await super().shutdown(sockets=sockets)
