"""A deadline for request headers (``--header-timeout``): against slowloris.

uvicorn (0.54) closes a connection idle between requests after ``timeout_keep_alive``
seconds, but the first byte of a request stops that clock, and nothing bounds how long the
rest of the headers take: a client sending them a byte at a time holds a connection for as
long as it likes, and a few thousand such clients hold them all. uvicorn offers no option
for it, so ``header_deadline_protocol`` subclasses its HTTP protocol class (h11's or
httptools', whichever it chose) with one timer: started when a connection opens and when
an answer on it completes, it closes the connection unless a new request's headers have
been read since (the protocol then has a new request cycle). Closing sends nothing: a
client that sent half a request gets no answer to it.
"""

from __future__ import annotations

from typing import Any


def header_deadline_protocol(base: type[Any], seconds: float) -> type[Any]:
    """``base`` (uvicorn's HTTP protocol class), closing a connection whose request headers
    are not all read within ``seconds``."""

    class HeaderDeadline(base):
        _header_timer = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._await_headers()

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing():  # kept alive: the next request's headers have the same time
                self._await_headers()

        def connection_lost(self, exc):
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

        def _await_headers(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            waiting = self.cycle  # the request answered last (None: none yet); its headers make a new one
            self._header_timer = self.loop.call_later(seconds, self._headers_due, waiting)

        def _headers_due(self, waiting) -> None:
            self._header_timer = None
            if self.cycle is not waiting:
                return  # a request's headers came in time
            if waiting is not None and not waiting.response_complete:
                return  # a pipelined request, read before the last answer, is being answered
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
