"""The HTTP server protects itself: head size, URL length, read deadlines, connection cap.

uvicorn's httptools protocol, which we serve with, buffers a request head of any size
(a 128 MB header was parsed for 23 s while other requests waited) and keeps a
connection that never finishes its head open indefinitely; its ``limit_concurrency``
then counts those connections against everyone. ``LimitedHttpToolsProtocol`` is the same
protocol with what it lacks (docs/operations.md, "Server limits"):

- a URL longer than ``max_url_bytes`` is refused with 414, a head (request line and
  headers) larger than ``max_head_bytes`` or with more than ``max_headers`` fields with
  431, as soon as the bytes arrive, not after parsing all of them;
- a connection must deliver a request head within ``head_timeout_seconds`` of
  connecting or of the head's first byte, and then its body within
  ``request_timeout_seconds`` (else 408 and closed); between requests uvicorn's own
  keep-alive timeout applies. A slowloris client cannot hold a connection, or a
  slot of the connection cap, for longer than that.

These answers happen before there is a request for the app to see, so they are
written here, in the flat error shape of profile A, and always close the connection.
The limits travel to every worker of ``serve --workers N`` inside the uvicorn
``Config`` (``LimitedConfig``), which uvicorn pickles for each worker process.

The protocol also sends each response's head and body in one write
(``HeadWithBodyTransport``): uvicorn writes the head as soon as the app starts its
response, then the body, two system calls and two TCP segments for every answer.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import msgspec
from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

log = logging.getLogger("execauth.server")

LINGER_SECONDS = 1.0
_REASONS = {408: b"Request Timeout", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}
_CODES = {408: "request_timeout", 414: "uri_too_long", 431: "request_header_fields_too_large"}


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_url_bytes: int = 8 * 1024
    max_head_bytes: int = 16 * 1024
    max_headers: int = 100
    head_timeout_seconds: float = 10.0
    request_timeout_seconds: float = 30.0


class LimitedConfig(Config):
    """uvicorn's ``Config`` carrying our ``ServerLimits`` (pickled to each worker with it)."""

    def __init__(self, app: Any, *, limits: ServerLimits, **options: Any) -> None:
        super().__init__(app, http=LimitedHttpToolsProtocol, **options)
        self.server_limits = limits


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = getattr(config, "server_limits", None)
        self._limits = limits if isinstance(limits, ServerLimits) else ServerLimits()
        self._in_head = True  # until the head of the current request is complete
        self._head_bytes = 0
        self._url_bytes = 0
        self._header_count = 0
        self._answered = False  # a response was written on this connection
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None

    # --- connection ------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._limits.head_timeout_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: read and drop (see _refuse)
        super().data_received(data)
        if self._in_head and not self._refused:
            # Everything in this chunk was head (it is still incomplete): count it now,
            # chunk by chunk, instead of letting the parser buffer megabytes first.
            self._head_bytes += len(data)
            self._check_head()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # a refusal of ours already answered and closed
            super().send_400_response(msg)

    # --- parser callbacks --------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = self._url_bytes = self._header_count = 0
        self._arm(self._limits.head_timeout_seconds)

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        # A head that arrived in one chunk with its end was not counted in data_received.
        self._head_bytes = max(
            self._head_bytes,
            self._url_bytes + sum(len(n) + len(v) + 4 for n, v in self.headers),
        )
        if self._check_head():
            return
        self._arm(self._limits.request_timeout_seconds)  # now for the body
        super().on_headers_complete()
        if self.cycle is not None:
            # The app's task starts on the next turn of the loop, so the cycle has not
            # written anything yet.
            self.cycle.transport = HeadWithBodyTransport(self.transport, self.loop)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._disarm()  # the whole request is in; the app's time is its own
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._answered = True
        super().on_response_complete()

    # --- limits --------------------------------------------------------------------
    def _check_head(self) -> bool:
        limits = self._limits
        if self._url_bytes > limits.max_url_bytes:
            self._refuse(414, f"the URL is longer than {limits.max_url_bytes} bytes")
        elif self._head_bytes > limits.max_head_bytes + limits.max_url_bytes:
            self._refuse(431, f"the request headers exceed {limits.max_head_bytes} bytes")
        elif self._header_count > limits.max_headers:
            self._refuse(431, f"more than {limits.max_headers} request header fields")
        return self._refused

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._deadline_passed)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        busy = cycle is not None and not cycle.response_complete
        if busy and cycle.response_started:
            self.transport.close()  # an answer is already under way: just end it
        elif busy or not self._answered or self._head_bytes or self._url_bytes:
            self._refuse(408, "the request was not received in time")
        else:
            self.transport.close()  # an idle kept-alive connection: nothing to say

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` (flat error shape, as profile A) and close the connection."""
        self._refused = True
        self._disarm()
        log.info("refused a request: %d %s (client %s)", status, message, self.client)
        body = msgspec.json.encode({"error": _CODES[status], "message": message})
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        )
        self.transport.write(head + body)
        # Lingering close: half-close, drop what the client still sends, close after
        # LINGER_SECONDS. Closing at once with its bytes unread would reset the
        # connection, and a reset can destroy our answer before the client reads it.
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
        if self.cycle is not None and not self.cycle.response_complete:
            # The app (if it started) sees a disconnect instead of more body.
            self.cycle.disconnected = True
            self.cycle.message_event.set()


class HeadWithBodyTransport(asyncio.Transport):
    """One response cycle's view of the connection: its head leaves with its body.

    uvicorn writes a response's status line and headers when the app starts the response
    and the body when the app sends it; the app sends both in the same turn of the event
    loop. Each write is a system call and a TCP segment (the socket has Nagle off), and
    the client wakes for each. Here the head is held until the next write and sent with
    it. A body that does not come in the same turn (a streamed answer) does not hold the
    head back: it leaves at the end of the turn, and closing the connection sends it first.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._head_sent = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._head_sent:
            self._transport.write(data)
        elif self._head is None:
            self._head = bytes(data)
            self._loop.call_soon(self._send_head)
        else:
            head, self._head, self._head_sent = self._head, None, True
            self._transport.write(head + data)

    def _send_head(self) -> None:
        if self._head is not None:
            head, self._head, self._head_sent = self._head, None, True
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self._send_head()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)
