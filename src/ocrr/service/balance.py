"""``ocrr serve --workers N`` spreads connections evenly: least connections, not the kernel's hash.

Each worker listens on its own SO_REUSEPORT socket, and the kernel picks the socket of a new
connection by a hash of its addresses: even on average, uneven for the few long-lived
keep-alive connections a proxy or a load generator opens (8 connections over 2 workers split
7:1 or worse in 7 % of starts, 6:2 in 22 %). A keep-alive connection stays with the worker it
reached, so the busier worker's queue sets the tail latency for as long as they live.

So a worker that accepts a connection while it would then hold two more than the least
loaded worker hands it over, before reading a byte of it: the socket goes to that worker
over a Unix datagram socket (SCM_RIGHTS), which serves it as if it had accepted it. Every
worker publishes, in a table the supervisor shares with them all (``Mesh``), whether it is
serving, how many connections it holds, and how many it handed to and took from each other
worker; a connection handed over but not yet taken counts for its receiver, so a burst of
new connections is not all sent one way. Each cell has one writer: no locks.

Not with TLS: the handshake comes before the protocol sees the connection, and its state
cannot move with the socket (``ocrr serve --tls-cert`` keeps the kernel's spread).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_READY, _OPEN, _FIXED = 0, 1, 2  # per worker: serving (1) or not, connections held, then the counts


@dataclass
class Mesh:
    """What the supervisor makes once and every worker (every restart too) is given: the
    table, and per worker a datagram socket pair (``inboxes[s]`` is read by worker ``s``;
    the others write to ``outboxes[s]``). The supervisor keeps every end open, so
    connections handed to a worker that has just died wait for the one that replaces it."""

    table: Any  # a shared array of int64 (multiprocessing RawArray "q")
    inboxes: list[socket.socket]
    outboxes: list[socket.socket]

    @classmethod
    def create(cls, ctx, workers: int) -> Mesh:
        table = ctx.RawArray("q", workers * (_FIXED + 2 * workers))
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(workers)]
        return cls(table, [inbox for inbox, _ in pairs], [outbox for _, outbox in pairs])

    @property
    def workers(self) -> int:
        return len(self.inboxes)

    def cells(self) -> np.ndarray:
        """The table as (workers, 2 + 2 workers): ready, open, handed to [t]..., taken from [s]..."""
        return np.frombuffer(self.table, np.int64).reshape(self.workers, -1)

    def gone(self, slot: int) -> None:
        """The supervisor saw worker ``slot`` die: hand it nothing until its successor serves."""
        self.cells()[slot, _READY] = 0

    def close(self) -> None:
        for sock in (*self.inboxes, *self.outboxes):
            sock.close()


class Balancer:
    """Worker ``slot``'s side of the mesh: decides, hands over and takes in connections."""

    def __init__(self, mesh: Mesh, slot: int):
        self.slot, self.workers = slot, mesh.workers
        self.cells = mesh.cells()
        self.inbox = mesh.inboxes[slot]
        self.outboxes = mesh.outboxes
        for sock in (self.inbox, *self.outboxes):
            sock.setblocking(False)  # a full inbox: the connection stays here
        self._handed = _FIXED  # column of "handed to worker 0"
        self._taken = _FIXED + self.workers  # column of "taken from worker 0"
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # while serving (``serve``)
        self._protocol: Callable[[int], asyncio.Protocol] | None = None
        self.cells[slot, _OPEN] = 0  # a restarted worker holds none of its predecessor's connections

    def load(self, slot: int) -> int:
        """Connections worker ``slot`` holds, plus those handed to it and not yet taken in."""
        c = self.cells
        in_flight = c[:, self._handed + slot].sum() - c[slot, self._taken : self._taken + self.workers].sum()
        return int(c[slot, _OPEN] + max(in_flight, 0))

    def receiver(self) -> int | None:
        """The worker a new connection accepted here should go to, or None to keep it."""
        mine = self.load(self.slot) + 1  # with the new one
        best, least = None, mine - 1  # hand over only to a worker holding at least 2 fewer
        for t in range(self.workers):
            if t != self.slot and self.cells[t, _READY]:
                load = self.load(t)
                if load < least:
                    best, least = t, load
        return best

    def hand_off(self, transport: asyncio.BaseTransport) -> bool:
        """Send the transport's socket to the least-loaded worker, if this one holds too
        many; True when sent (then close the transport here without touching the socket)."""
        target = self.receiver()
        sock = transport.get_extra_info("socket")
        if target is None or sock is None:
            return False
        try:
            socket.send_fds(self.outboxes[target], [bytes([self.slot])], [sock.fileno()])
        except OSError:  # its inbox is full, or the socket already closed: serve it here
            return False
        self.cells[self.slot, self._handed + target] += 1
        return True

    def opened(self, sender: int | None) -> None:
        """A connection is served here (``sender``: the worker that handed it over)."""
        self.cells[self.slot, _OPEN] += 1
        if sender is not None:
            self.cells[self.slot, self._taken + sender] += 1

    def closed(self) -> None:
        self.cells[self.slot, _OPEN] -= 1

    def serve(self, loop: asyncio.AbstractEventLoop, protocol: Callable[[int], asyncio.Protocol]) -> None:
        """Take in the connections other workers hand over (``protocol(sender)`` serves one),
        and tell them this worker is serving."""
        self._loop, self._protocol = loop, protocol
        loop.add_reader(self.inbox.fileno(), self._take_in)
        self.cells[self.slot, _READY] = 1

    def stop(self) -> None:
        """Stopping: hand this worker nothing more (what is handed over meanwhile waits for
        the next worker in this slot, or closes with the service)."""
        self.cells[self.slot, _READY] = 0
        if self._loop is not None:
            self._loop.remove_reader(self.inbox.fileno())
            self._loop = None

    def _take_in(self) -> None:
        assert self._loop is not None  # a reader of the serving loop
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(self.inbox, 16, 4)
            except BlockingIOError:
                return
            socks = [_socket(fd) for fd in fds]
            sock = socks[0] if len(socks) == 1 else None
            if len(msg) != 1 or msg[0] >= self.workers or sock is None or sock.type != socket.SOCK_STREAM:
                for s in socks:  # not what a worker sends
                    if s is not None:
                        s.close()
                continue
            sender = msg[0]
            task = self._loop.create_task(self._adopt(sock, sender))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _adopt(self, sock: socket.socket, sender: int) -> None:
        assert self._loop is not None and self._protocol is not None
        protocol = self._protocol
        try:
            await self._loop.connect_accepted_socket(lambda: protocol(sender), sock)
        except BaseException as e:  # taken, then lost: not in flight any more, whatever the cause
            self.cells[self.slot, self._taken + sender] += 1
            sock.close()
            if not isinstance(e, OSError):  # OSError: the client went away meanwhile; anything else is a bug
                raise


def _socket(fd: int) -> socket.socket | None:
    """The socket behind a received descriptor; None (and closed) when it is not one."""
    try:
        return socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return None


def balanced_protocol(base: type[Any], balancer: Balancer) -> type[Any]:
    """``base`` (uvicorn's HTTP protocol class), handing connections over as ``balancer``
    decides and counting those it serves."""

    class Balanced(base):
        def __init__(self, *args, sender: int | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self._sender, self._counted = sender, False

        def connection_made(self, transport):
            if self._sender is None and balancer.hand_off(transport):
                transport.close()  # the socket lives on in the receiving worker
                return
            balancer.opened(self._sender)
            self._counted = True
            super().connection_made(transport)

        def connection_lost(self, exc):
            if not self._counted:  # handed over: nothing here to tear down
                return
            self._counted = False
            balancer.closed()
            super().connection_lost(exc)

    return Balanced
