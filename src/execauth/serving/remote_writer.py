"""The receipt writer in a process of its own, for ``execauth serve --workers N``.

One Python process is one GIL. Under load the request loop and the writer thread
fight for it: a batch whose SQL takes 1–3 ms alone took 10 ms inside a busy
gateway process, waiting for the GIL after every SQLite call while holding the
write lock (docs/performance.md). With several gateway processes that wait would
also hold up every other process's commit. So the serving topology is N gateway
workers that decide and sign, and one writer process that owns the database's
write path: the group-commit ``ReceiptWriter`` and the log keeping, as in a single
process, only with a GIL to themselves (on a SQLite file the sequencer has a process of
its own, ``serving/log_keeper.py``); there the writer commits on the loop that reads
the frames (``ReceiptWriter.start_on_loop``), a batch being what one turn read.

The gateways reach it over a Unix socket. Each frame is a 4-byte big-endian
length and a msgpack body (msgspec): a ``WriteRequest`` carries the record and its
quota, a ``CountRepeat`` a repeat the gateway answered from memory; the ``WriteReply``
comes only after the batch holding the record (or the count) committed,
so an acknowledged receipt is durable exactly as with the in-process writer. A
lost connection, a dead writer or a reply that does not come in time is
``ServiceUnavailable`` for the requests waiting on it: never a receipt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

import msgspec

from execauth.errors import QuotaExceeded, ReceiptIdTaken, ServiceUnavailable
from execauth.serving.receipt_writer import Settle, expire_unconfirmed
from execauth.store.executions import ExecutionRecord, PriorExecution, Repeat
from execauth.tenancy.quota import QuotaCheck

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024  # a record holds one receipt and one request (<= 64 KiB each)
CONNECT_TIMEOUT_SECONDS = 2.0


class WriteRequest(msgspec.Struct, array_like=True, frozen=True, tag=True):
    id: int
    record: ExecutionRecord
    quota: QuotaCheck | None


class CountRepeat(msgspec.Struct, array_like=True, frozen=True, tag=True):
    id: int
    repeat: Repeat


class WriteReply(msgspec.Struct, array_like=True, frozen=True):
    id: int
    outcome: Literal["stored", "repeat", "quota", "receipt_id_taken", "unavailable"]
    prior: PriorExecution | None = None
    detail: str = ""


_encode = msgspec.msgpack.Encoder().encode
_decode_request = msgspec.msgpack.Decoder(WriteRequest | CountRepeat).decode
_decode_reply = msgspec.msgpack.Decoder(WriteReply).decode

# ``ReceiptWriter.submit``: queue a record, be told on the loop once its batch committed.
Submit = Callable[
    [ExecutionRecord | Repeat, QuotaCheck | None, Settle, asyncio.AbstractEventLoop], None
]


def _frame(message: WriteRequest | CountRepeat | WriteReply) -> bytes:
    body = _encode(message)
    return _LENGTH.pack(len(body)) + body


READ_SIZE = 256 * 1024


class FrameBuffer:
    """Whole frames out of a byte stream, however its reads cut them.

    One read takes whatever has arrived (under load, many frames: a committed batch's
    replies, many connections' records) instead of two awaited reads per frame.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes; raises ``ValueError`` for one over ``MAX_FRAME``."""
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        start = 0
        while len(buffer) - start >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer, start)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes exceeds {MAX_FRAME}")
            end = start + _LENGTH.size + length
            if len(buffer) < end:
                break
            frames.append(bytes(buffer[start + _LENGTH.size : end]))
            start = end
        del buffer[:start]
        return frames


class _Outbox:
    """Frames written during one turn of the event loop leave in one send.

    Each send wakes the peer process; under load a turn produces many frames (a
    committed batch's replies, the requests of many connections) and one wake-up
    carries them all. Nothing waits for a flush: it is the next thing the loop does.
    In-flight requests bound what can pile up, so there is no separate back-pressure.
    """

    def __init__(self, stream: asyncio.StreamWriter) -> None:
        self.stream = stream
        self._frames: list[bytes] = []

    def put(self, frame: bytes) -> None:
        if not self._frames:
            asyncio.get_running_loop().call_soon(self.flush)
        self._frames.append(frame)

    def flush(self) -> None:
        frames, self._frames = self._frames, []
        if not self.stream.is_closing():
            self.stream.write(b"".join(frames))


# --- the writer process's side -----------------------------------------------------------
class WriterServer:
    """Accepts gateway connections and answers each ``WriteRequest`` once it is committed."""

    def __init__(self, submit: Submit) -> None:
        self._submit = submit
        self._connections: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._server: asyncio.Server | None = None

    async def start(self, socket_path: str) -> None:
        self._server = await asyncio.start_unix_server(self._serve_connection, socket_path)

    async def wait_idle(self) -> None:
        """Return once every gateway connection has closed."""
        await self._idle.wait()

    async def close(self) -> None:
        """Stop accepting; connections still open are served until they close."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._idle.clear()
        answering = _Answering(_Outbox(writer), asyncio.get_running_loop())
        frames = FrameBuffer()
        try:
            while True:
                try:
                    data = await reader.read(READ_SIZE)
                except ConnectionError:
                    return  # the gateway went away
                if not data:
                    return
                for frame in frames.feed(data):
                    self._accept(_decode_request(frame), answering)
        except Exception:
            log.exception("a gateway connection sent something unreadable; closing it")
        finally:
            # Every record read is written and answered (if the gateway still listens):
            # its commit may already be under way. The last replies may still wait for
            # their turn's send: sent now, before the close.
            await answering.all_answered()
            answering.send_now()
            writer.close()
            self._connections.discard(task)
            if not self._connections:
                self._idle.set()

    def _accept(self, request: WriteRequest | CountRepeat, answering: _Answering) -> None:
        """Hand the record to the writer; its reply leaves once the batch committed."""
        answering.started()
        item, quota = (
            (request.record, request.quota)
            if isinstance(request, WriteRequest)
            else (request.repeat, None)
        )
        try:
            self._submit(
                item, quota, functools.partial(answering.answer, request.id), answering.loop
            )
        except Exception as exc:  # noqa: BLE001 - not queued (not running): a 503, never stored
            answering.answer(request.id, None, exc)


class _Answering:
    """One gateway connection's records in flight, and their replies."""

    def __init__(self, outbox: _Outbox, loop: asyncio.AbstractEventLoop) -> None:
        self._outbox = outbox
        self.loop = loop  # where the writer's committed batches call ``answer``
        self._in_flight = 0
        self._none_in_flight = asyncio.Event()
        self._none_in_flight.set()

    def started(self) -> None:
        self._in_flight += 1
        self._none_in_flight.clear()

    def answer(
        self, request_id: int, prior: PriorExecution | None, error: BaseException | None
    ) -> None:
        try:
            self._outbox.put(_frame(_reply(request_id, prior, error)))
        finally:
            # Counted answered even if its reply could not be framed: the gateway's own
            # deadline answers that request (503), and the connection can still close.
            self._in_flight -= 1
            if not self._in_flight:
                self._none_in_flight.set()

    async def all_answered(self) -> None:
        await self._none_in_flight.wait()

    def send_now(self) -> None:
        self._outbox.flush()


def _reply(
    request_id: int, prior: PriorExecution | None, error: BaseException | None
) -> WriteReply:
    if error is None:
        if prior is None:
            return WriteReply(request_id, "stored")
        return WriteReply(request_id, "repeat", prior)
    if isinstance(error, QuotaExceeded):
        return WriteReply(request_id, "quota")
    if isinstance(error, ReceiptIdTaken):  # before its base class, ServiceUnavailable
        return WriteReply(request_id, "receipt_id_taken", detail=error.message)
    if isinstance(error, ServiceUnavailable):
        return WriteReply(request_id, "unavailable", detail=error.message)
    log.error("writing a receipt failed", exc_info=error)
    return WriteReply(request_id, "unavailable", detail="the receipt could not be stored")


# --- the gateway's side ------------------------------------------------------------------
class RemoteReceiptWriter:
    """``ReceiptWriter.write`` for a gateway worker: the same contract, over the socket."""

    def __init__(self, socket_path: str, *, timeout_seconds: float) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[WriteReply]] = {}
        self._outbox: _Outbox | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None

    def start(self) -> None:
        """Nothing to start: the first write (or ``ready``) connects, on the serving loop."""

    def stop(self) -> None:
        if self._outbox is not None:
            self._outbox.stream.close()
            self._outbox = None

    async def ready(self) -> bool:
        """Whether the writer process answers (``/readyz``)."""
        try:
            await self._connection()
        except ServiceUnavailable:
            return False
        return True

    async def write(
        self, record: ExecutionRecord, quota: QuotaCheck | None = None
    ) -> PriorExecution | None:
        """Durably store ``record`` (see ``ReceiptWriter.write``); the same outcomes and errors."""
        reply = await self._ask(functools.partial(WriteRequest, record=record, quota=quota))
        if reply.outcome == "stored":
            return None
        if reply.outcome == "repeat" and reply.prior is not None:
            return reply.prior
        if reply.outcome == "quota" and quota is not None:
            raise quota.exceeded(datetime.fromtimestamp(record.decided_at_ms / 1000, UTC))
        if reply.outcome == "receipt_id_taken":
            raise ReceiptIdTaken(reply.detail)
        raise ServiceUnavailable(reply.detail or "the receipt could not be stored")

    async def count_repeat(self, repeat: Repeat) -> None:
        """Durably count a repeat (see ``ReceiptWriter.count_repeat``)."""
        reply = await self._ask(functools.partial(CountRepeat, repeat=repeat))
        if reply.outcome != "stored":
            raise ServiceUnavailable(reply.detail or "the repeat could not be counted")

    async def _ask(self, message: Callable[[int], WriteRequest | CountRepeat]) -> WriteReply:
        """Send ``message(id)``; its reply, or ``ServiceUnavailable`` after the deadline."""
        outbox = await self._connection()
        self._next_id += 1
        request_id = self._next_id
        loop = asyncio.get_running_loop()
        reply_future: asyncio.Future[WriteReply] = loop.create_future()
        self._waiting[request_id] = reply_future
        # A timer on the future itself: asyncio.wait_for would wrap it in more future
        # and callback machinery on every request.
        deadline = loop.call_later(self.timeout_seconds, expire_unconfirmed, reply_future)
        try:
            outbox.put(_frame(message(request_id)))
            return await reply_future
        finally:
            deadline.cancel()
            self._waiting.pop(request_id, None)

    async def _connection(self) -> _Outbox:
        if self._outbox is not None and not self._outbox.stream.is_closing():
            return self._outbox
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._outbox is not None and not self._outbox.stream.is_closing():
                return self._outbox
            try:
                reader, stream = await asyncio.wait_for(
                    asyncio.open_unix_connection(self.socket_path), CONNECT_TIMEOUT_SECONDS
                )
            except (OSError, TimeoutError) as exc:
                raise ServiceUnavailable("the receipt writer process is not reachable") from exc
            self._outbox = _Outbox(stream)
            self._reader_task = asyncio.create_task(self._read_replies(reader, stream))
            return self._outbox

    async def _read_replies(
        self, reader: asyncio.StreamReader, stream: asyncio.StreamWriter
    ) -> None:
        frames = FrameBuffer()
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    raise ConnectionResetError("end of stream")
                for frame in frames.feed(data):
                    reply = _decode_reply(frame)
                    future = self._waiting.get(reply.id)
                    if future is not None and not future.done():
                        future.set_result(reply)
        except ConnectionError:
            # Our own close (``stop``, at shutdown) ends the read the same way; only the
            # other side's hang-up is news for an operator.
            if not stream.is_closing():
                log.warning("the receipt writer process closed the connection")
        except Exception:
            log.exception("unreadable reply from the receipt writer process")
        finally:
            stream.close()
            if self._outbox is not None and self._outbox.stream is stream:
                self._outbox = None
            # Whatever was sent on this connection may or may not be stored: the
            # requests fail (503) and a retry with the same Idempotency-Key settles it.
            lost = ServiceUnavailable("the receipt writer process went away")
            for future in list(self._waiting.values()):
                if not future.done():
                    future.set_exception(lost)
