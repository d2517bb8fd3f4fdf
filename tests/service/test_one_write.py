"""Each answer goes out in one write (service/one_write.py), and the bytes a client reads are
the ones uvicorn's own protocol sends: for a JSON answer, a HEAD, a streamed (chunked)
answer, an app that fails after starting its answer, and a ``100 Continue`` (which must
still go out before the client sends its body)."""

from __future__ import annotations

import asyncio

import pytest
import uvicorn
from uvicorn.server import ServerState

from ocrr.service.one_write import one_write_protocol

pytest.importorskip("httptools")


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/echo":  # reading the body sends the 100 Continue the client waits for
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        answer = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": answer})
        await send({"type": "http.response.body", "body": body})
    elif path == "/json":
        headers = [(b"content-type", b"application/json"), (b"content-length", b"8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"a": 1}'})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"ab", b"cd"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    else:  # fails after starting its answer: the client gets the head, then the close
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        raise RuntimeError("the app fails mid-answer")


REQUESTS = {
    "json": b"GET /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "head": b"HEAD /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "stream": b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    "fails": b"GET /fails HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
}
EXPECTING = b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
KEPT_ALIVE = b"GET /json HTTP/1.1\r\nHost: x\r\n\r\n"


class _Recorded:
    """A real transport, recording each write."""

    def __init__(self, transport, writes: list[bytes]):
        self._transport, self.writes = transport, writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name):
        return getattr(self._transport, name)


async def _served(one_write: bool, exchange) -> tuple[object, list[bytes]]:
    """Serve ``_app`` over a real 127.0.0.1 socket with uvicorn's httptools protocol (wrapped
    when ``one_write``); run ``exchange(port)``; return its result and the server's writes."""
    config = uvicorn.Config(_app, http="httptools", date_header=False, server_header=False, log_level="critical")
    config.load()
    base = one_write_protocol(config.http_protocol_class) if one_write else config.http_protocol_class
    writes: list[bytes] = []

    class Recording(base):
        def connection_made(self, transport):
            super().connection_made(_Recorded(transport, writes))

    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: Recording(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    try:
        return await exchange(server.sockets[0].getsockname()[1]), writes
    finally:
        server.close()
        await server.wait_closed()


async def _read_to_close(request: bytes, port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    answer = await reader.read()  # to the server's close
    writer.close()
    return answer


async def _expect_continue(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(EXPECTING)
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # the body is sent only after it
    writer.write(b"hello")
    answer = interim + await reader.read()
    writer.close()
    return answer


async def _two_kept_alive(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = b""
    for _ in range(2):
        writer.write(KEPT_ALIVE)
        head = await reader.readuntil(b"\r\n\r\n")
        answers += head + await reader.readexactly(8)
    writer.close()
    return answers


@pytest.mark.parametrize("case", sorted(REQUESTS))
def test_the_client_reads_the_same_bytes(case):
    def exchange(port):
        return _read_to_close(REQUESTS[case], port)

    plain, _ = asyncio.run(_served(False, exchange))
    joined, writes = asyncio.run(_served(True, exchange))
    assert joined == plain
    assert plain.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"".join(writes) == joined


def test_an_answer_is_one_write():
    _, plain = asyncio.run(_served(False, lambda port: _read_to_close(REQUESTS["json"], port)))
    _, joined = asyncio.run(_served(True, lambda port: _read_to_close(REQUESTS["json"], port)))
    assert len(plain) == 2  # uvicorn's own: the head, then the body
    assert joined == [b"".join(plain)]


def test_answers_on_a_kept_alive_connection_are_one_write_each():
    plain, _ = asyncio.run(_served(False, _two_kept_alive))
    joined, writes = asyncio.run(_served(True, _two_kept_alive))
    assert joined == plain and len(writes) == 2
    assert writes[0] == writes[1] == joined[: len(joined) // 2]


def test_a_100_continue_goes_out_before_the_body_is_sent():
    plain, _ = asyncio.run(_served(False, _expect_continue))
    joined, writes = asyncio.run(_served(True, _expect_continue))
    assert joined == plain
    assert plain.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n") and plain.endswith(b"hello")
    assert writes == [b"HTTP/1.1 100 Continue\r\n\r\n", joined[len(writes[0]) :]]


def test_the_h11_protocol_is_left_as_it_is():
    config = uvicorn.Config(_app, http="h11")
    config.load()
    assert one_write_protocol(config.http_protocol_class) is config.http_protocol_class
