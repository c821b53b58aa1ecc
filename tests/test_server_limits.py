"""The HTTP server protects itself (api/server_limits.py): sizes, deadlines, the cap.

A real uvicorn server on a free port, in a thread, with the protocol and ``Config`` that
``execauth serve`` uses and a small app; the clients are raw sockets, because what is
tested is what a client that does not follow HTTP can do to the server. Deadlines are
short here (fractions of a second) so that the tests wait for them, not around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from execauth.api.server_limits import HeadWithBodyTransport, LimitedConfig, ServerLimits
from tests.serving import free_port

LIMITS = ServerLimits(
    max_url_bytes=4096,
    max_head_bytes=8192,
    max_headers=50,
    head_timeout_seconds=0.5,
    request_timeout_seconds=0.5,
)


async def _echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


async def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def _slow_stream(request: Request) -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        await asyncio.sleep(1.0)
        yield b"late"

    return StreamingResponse(chunks(), media_type="text/plain")


APP = Starlette(
    routes=[
        Route("/", _hello),
        Route("/echo", _echo, methods=["POST"]),
        Route("/slow-stream", _slow_stream),
    ]
)


class Running:
    def __init__(self, limits: ServerLimits, *, max_connections: int = 1000) -> None:
        self.port = free_port()
        config = LimitedConfig(
            APP,
            limits=limits,
            host="127.0.0.1",
            port=self.port,
            loop="uvloop",
            log_level="warning",
            lifespan="off",
            limit_concurrency=max_connections,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> Running:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in self.sockets:
            sock.close()
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def connect(self) -> socket.socket:
        """A raw connection, closed when the server stops."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        self.sockets.append(sock)
        return sock

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def server() -> Iterator[Running]:
    with Running(LIMITS) as running:
        yield running


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_an_ordinary_request_is_served(server: Running) -> None:
    assert httpx.get(server.url, headers={"x-fine": "a" * 2000}).text == "hello"


def test_a_128_mib_header_is_refused_with_431_as_its_first_kilobytes_arrive(
    server: Running,
) -> None:
    sock = server.connect()
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-huge: ")
    chunk, sent, started = b"a" * 65536, 0, time.monotonic()
    sock.setblocking(False)
    answer = b""
    while sent < 128 * 1024 * 1024 and not answer:
        try:
            sent += sock.send(chunk)
        except BlockingIOError:
            time.sleep(0.001)
        except (BrokenPipeError, ConnectionResetError):
            break
        with contextlib.suppress(BlockingIOError):
            answer = sock.recv(65536)
    sock.setblocking(True)
    answer += read_answer(sock)
    assert status_of(answer) == 431, answer[:200]
    assert b'"error":"request_header_fields_too_large"' in answer
    assert time.monotonic() - started < 2.0
    assert sent < 8 * 1024 * 1024  # refused early: nowhere near the 128 MiB


def test_a_url_over_the_limit_is_414(server: Running) -> None:
    sock = server.connect()
    sock.sendall(b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    answer = read_answer(sock)
    assert status_of(answer) == 414
    assert b'"error":"uri_too_long"' in answer


def test_a_head_over_the_limit_in_one_packet_is_431(server: Running) -> None:
    sock = server.connect()
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"b" * 20_000 + b"\r\n\r\n")
    assert status_of(read_answer(sock)) == 431


def test_too_many_header_fields_are_431(server: Running) -> None:
    sock = server.connect()
    fields = b"".join(b"x-%d: 1\r\n" % n for n in range(60))
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n" + fields + b"\r\n")
    assert status_of(read_answer(sock)) == 431


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline(server: Running) -> None:
    sock = server.connect()
    started = time.monotonic()
    answer = read_answer(sock)
    assert status_of(answer) == 408
    assert 0.4 < time.monotonic() - started < 3.0


def test_a_head_dribbled_slowly_is_408_at_the_head_deadline(server: Running) -> None:
    sock = server.connect()
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")
    started = time.monotonic()
    try:
        while time.monotonic() - started < 5:
            sock.sendall(b"x-slow: 1\r\n")  # never the blank line that ends the head
            time.sleep(0.05)
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert time.monotonic() - started < 3.0, "the slow head was never cut off"
    assert status_of(read_answer(sock)) in (408, 0)  # 0: the reset beat the answer


def test_a_body_that_stops_arriving_is_408_at_the_request_deadline(server: Running) -> None:
    sock = server.connect()
    sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nhalf")
    started = time.monotonic()
    answer = read_answer(sock)
    assert status_of(answer) == 408
    assert time.monotonic() - started < 3.0


def test_a_kept_alive_connection_serves_a_second_request(server: Running) -> None:
    sock = server.connect()
    for _ in range(2):
        sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_half_sent_connections_at_the_cap_do_not_keep_new_clients_out() -> None:
    with Running(replace(LIMITS, head_timeout_seconds=0.5), max_connections=20) as running:
        stalled = [running.connect() for _ in range(20)]
        for sock in stalled:
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n")  # and nothing more, ever
        time.sleep(0.2)
        assert httpx.get(running.url).status_code == 503  # the cap is full of them
        deadline = time.monotonic() + 5
        while httpx.get(running.url).status_code != 200:
            assert time.monotonic() < deadline, "half-sent connections kept the cap full"
            time.sleep(0.1)


# --- one write per response -------------------------------------------------------------
class RecordingTransport(asyncio.Transport):
    """The connection under a response cycle: what was written, in how many writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


@pytest.mark.anyio
async def test_a_response_head_leaves_with_its_body_in_one_write() -> None:
    recorded = RecordingTransport()
    transport = HeadWithBodyTransport(recorded, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert recorded.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)  # the turn ends: nothing is left to send
    assert len(recorded.writes) == 1


@pytest.mark.anyio
async def test_a_head_whose_body_is_late_leaves_at_the_end_of_the_turn() -> None:
    recorded = RecordingTransport()
    transport = HeadWithBodyTransport(recorded, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    assert recorded.writes == []
    await asyncio.sleep(0)
    assert recorded.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
    transport.write(b"4\r\nlate\r\n")
    assert recorded.writes[1:] == [b"4\r\nlate\r\n"]


@pytest.mark.anyio
async def test_closing_sends_a_held_head_first() -> None:
    recorded = RecordingTransport()
    transport = HeadWithBodyTransport(recorded, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    transport.close()
    assert recorded.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]
    assert recorded.closed


def test_a_streamed_answer_sends_its_head_before_its_body_is_ready(server: Running) -> None:
    sock = server.connect()
    sock.sendall(b"GET /slow-stream HTTP/1.1\r\nhost: x\r\n\r\n")
    sock.settimeout(0.8)  # the body comes after 1 s; the head must not wait for it
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
