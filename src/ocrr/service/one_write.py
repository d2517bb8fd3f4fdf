"""An answer's status line, headers and first body bytes go out in one write.

uvicorn (0.54, its httptools protocol) writes an answer's head when the app starts the
response and its body when the app sends it: two writes, so two system calls, two TCP
segments (its sockets do not delay small writes) and a client woken twice, for every
answer. On a loaded box each wake-up can wait for a core, and the head alone is of no use
to the client. ``one_write_protocol`` subclasses the protocol class so that each request's
cycle writes through ``_HeadHeld``: the head is kept until the first body bytes (or the
close) and sent with them. The bytes on the wire are the same, in the same order; a
``100 Continue``, written before the response starts, goes out at once as before.
"""

from __future__ import annotations

from typing import Any


def one_write_protocol(base: type[Any]) -> type[Any]:
    """``base`` (uvicorn's httptools protocol class), sending each answer's head with its
    first body bytes. Another protocol class (h11's, whose cycles write differently) is
    returned as it is."""
    if not hasattr(base, "on_headers_complete"):
        return base

    class OneWrite(base):
        def on_headers_complete(self):
            before = self.cycle
            super().on_headers_complete()
            cycle = self.cycle
            # A new cycle (none for an upgrade) has not run yet: its task starts on the next turn.
            if cycle is not None and cycle is not before:
                cycle.transport = _HeadHeld(cycle.transport, cycle)

    return OneWrite


class _HeadHeld:
    """``transport`` for one request's ``cycle``: the first write after the response started
    (the head) is held and sent with the next write or before a close."""

    def __init__(self, transport: Any, cycle: Any):
        self._transport, self._cycle = transport, cycle
        self._head: bytes | None = None
        self._head_seen = False

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
        elif not self._head_seen and self._cycle.response_started:
            self._head, self._head_seen = data, True
            return
        self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, …: the transport's own
        return getattr(self._transport, name)
