"""The writer process's socket (``serve --workers N``): the same contract as the writer thread.

The app here is the real gateway whose receipts go through ``RemoteReceiptWriter``
to a ``WriterServer`` wrapping a real ``ReceiptWriter``, over a real Unix socket.
Whatever goes wrong on that path (no writer, a dropped connection, no answer in
time) the client gets 503 and no receipt; what it acknowledges is stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec
import pytest

from execauth.api.app import create_app
from execauth.config import PlanSettings
from execauth.errors import ReceiptIdTaken
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.serving.remote_writer import (
    MAX_FRAME,
    FrameBuffer,
    RemoteReceiptWriter,
    WriteReply,
    WriteRequest,
    WriterServer,
)
from execauth.serving.runtime import Runtime
from execauth.serving.write_path import remote_write_path
from tests.conftest import Tenant, make_tenant, small_plans
from tests.store.test_executions import record

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    return small_plans(free_executes=3)


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    directory = Path(tempfile.mkdtemp(prefix="ea-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@dataclass
class WriterSide:
    """The writer process's half, run in the test's loop: its commits on a thread of their
    own, or (as the writer process runs them) on the loop that reads the frames."""

    writer: ReceiptWriter
    socket_path: str
    commits_on: str  # "thread" or "loop"
    server: WriterServer | None = None

    def start_writer(self) -> None:
        if self.commits_on == "loop":
            self.writer.start_on_loop(asyncio.get_running_loop())
        else:
            self.writer.start()

    async def start(self) -> None:
        self.server = WriterServer(self.writer.submit)
        await self.server.start(self.socket_path)

    async def stop(self) -> None:
        assert self.server is not None
        await self.server.close()


@pytest.fixture(params=["thread", "loop"])
async def writer_side(
    runtime: Runtime, socket_dir: Path, request: pytest.FixtureRequest
) -> AsyncIterator[WriterSide]:
    local = runtime.writer
    assert isinstance(local, ReceiptWriter)
    side = WriterSide(local, str(socket_dir / "writer.sock"), request.param)
    side.start_writer()
    await side.start()
    # The gateway of a worker: it has no writer thread, only the socket.
    local_path = runtime.write_path
    runtime.write_path = remote_write_path(local_path, side.socket_path, timeout=2.0)
    yield side
    runtime.write_path = local_path
    if side.server is not None:
        await side.server.close()
    local.stop()


@pytest.fixture
async def client(runtime: Runtime, writer_side: WriterSide) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c
        runtime.writer.stop()
        # The app's shutdown stops the runtime's writer before it disposes of the engine:
        # let that be the real one, so that its connection is closed, not leaked.
        runtime.write_path.sink = writer_side.writer


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> Tenant:
    return await make_tenant(client)  # on the "free" plan: 3 executes (``plans``)


async def test_an_acknowledged_receipt_is_stored_byte_for_byte(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200, response.text
    assert response.json()["decision"] == "PERMIT"
    stored = runtime.executions.receipt_bytes(tenant.org_id, response.json()["execution_id"])
    assert stored == response.content


async def test_a_repeated_idempotency_key_gets_the_first_receipt(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = tenant.auth | {"Idempotency-Key": "deploy-42"}
    first = await client.post("/v1/execute", json=PERMIT, headers=headers)
    again = await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"


async def test_a_repeat_answered_by_the_gateway_is_counted_by_the_writer_process(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    headers = tenant.auth | {"Idempotency-Key": "deploy-43"}
    first = await client.post("/v1/execute", json=PERMIT, headers=headers)
    for _ in range(2):
        await client.post("/v1/execute", json=PERMIT, headers=headers)
    events = runtime.executions.lineage(tenant.org_id, first.json()["execution_id"])
    assert [(e.kind, e.details["repeats"]) for e in events] == [("idempotent_repeat", 2)]


async def test_the_quota_is_enforced_through_the_writer_process(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    answers = await asyncio.gather(
        *(client.post("/v1/execute", json=PERMIT, headers=tenant.auth) for _ in range(5))
    )
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200, 200, 200, 429, 429]
    refused = next(a for a in answers if a.status_code == 429)
    assert refused.json()["error"] == "SERVICE_PLAN_LIMIT_EXCEEDED"
    assert "Retry-After" in refused.headers
    assert runtime.executions.count(tenant.org_id) == 3


async def test_a_receipt_id_another_receipt_holds_comes_back_as_taken(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    first = record(org_id=tenant.org_id)
    clash = dataclasses.replace(record(org_id=tenant.org_id), receipt_id=first.receipt_id)
    assert isinstance(runtime.writer, RemoteReceiptWriter)

    assert await runtime.writer.write(first) is None
    with pytest.raises(ReceiptIdTaken):  # the use case signs it again (usecases/execute.py)
        await runtime.writer.write(clash)
    assert runtime.executions.count(tenant.org_id) == 1


async def test_no_writer_process_is_503_and_not_ready(
    client: httpx.AsyncClient, tenant: Tenant, writer_side: WriterSide, runtime: Runtime
) -> None:
    await writer_side.stop()
    runtime.writer.stop()  # drop the established connection too
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_unavailable(response, "not reachable")
    assert (await client.get("/readyz")).status_code == 503
    assert runtime.executions.count(tenant.org_id) == 0


async def test_the_gateway_reconnects_when_the_writer_process_is_back(
    client: httpx.AsyncClient, tenant: Tenant, writer_side: WriterSide, runtime: Runtime
) -> None:
    await writer_side.stop()
    runtime.writer.stop()
    assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).status_code == 503
    await writer_side.start()
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200, response.text
    assert (await client.get("/readyz")).status_code == 200


def assert_unavailable(response: httpx.Response, because: str) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "service_unavailable"
    assert because in body["message"]
    assert "decision" not in body


async def test_a_connection_lost_before_the_reply_is_503(
    client: httpx.AsyncClient, tenant: Tenant, socket_dir: Path, runtime: Runtime
) -> None:
    async def read_then_hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    path = str(socket_dir / "hangs-up.sock")
    server = await asyncio.start_unix_server(read_then_hang_up, path)
    runtime.write_path.sink = RemoteReceiptWriter(path, timeout_seconds=5.0)
    async with server:
        response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_unavailable(response, "went away")


async def test_no_reply_in_time_is_503(
    client: httpx.AsyncClient, tenant: Tenant, socket_dir: Path, runtime: Runtime
) -> None:
    hung_up = asyncio.Event()

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client goes away
        writer.close()
        hung_up.set()

    path = str(socket_dir / "silent.sock")
    server = await asyncio.start_unix_server(never_answer, path)
    runtime.write_path.sink = RemoteReceiptWriter(path, timeout_seconds=0.2)
    async with server:
        response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
        runtime.writer.stop()
        await asyncio.wait_for(hung_up.wait(), 5)
    assert_unavailable(response, "in time")


async def test_a_writer_that_cannot_store_is_503(
    client: httpx.AsyncClient, tenant: Tenant, writer_side: WriterSide
) -> None:
    writer_side.writer.stop()  # the writer process is up, its writer is not
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert_unavailable(response, "not accepting writes")
    writer_side.start_writer()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def logged_when_the_connection_ends(
    socket_dir: Path, caplog: pytest.LogCaptureFixture, writer_side: Handler, *, gateway_stops: bool
) -> str:
    """Connect a gateway's ``RemoteReceiptWriter`` to ``writer_side``, let the gateway stop
    (or the writer side hang up), and return what was logged at WARNING and above."""
    path = str(socket_dir / "ends.sock")
    remote = RemoteReceiptWriter(path, timeout_seconds=5.0)
    async with await asyncio.start_unix_server(writer_side, path):
        with caplog.at_level(logging.WARNING, logger="execauth.serving.remote_writer"):
            assert await remote.ready()
            reading = remote._reader_task
            assert reading is not None
            if gateway_stops:
                remote.stop()
            await asyncio.wait_for(reading, 5)
    return caplog.text


async def test_a_gateway_closing_its_own_connection_logs_no_warning(
    socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def serve_until_hung_up(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read()
        writer.close()

    logged = await logged_when_the_connection_ends(
        socket_dir, caplog, serve_until_hung_up, gateway_stops=True
    )
    assert "closed the connection" not in logged


async def test_a_writer_process_hanging_up_is_a_warning(
    socket_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    logged = await logged_when_the_connection_ends(socket_dir, caplog, hang_up, gateway_stops=False)
    assert "the receipt writer process closed the connection" in logged


# --- frames on the socket ---------------------------------------------------------------
def framed(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def test_a_frame_cut_into_single_bytes_is_read_whole() -> None:
    frames = FrameBuffer()
    stream = framed(b"first") + framed(b"second")
    read = [frame for byte in stream for frame in frames.feed(bytes([byte]))]
    assert read == [b"first", b"second"]


def test_every_frame_of_one_read_is_read() -> None:
    stream = b"".join(framed(b"r%d" % n) for n in range(100))
    assert FrameBuffer().feed(stream) == [b"r%d" % n for n in range(100)]


def test_an_empty_frame_is_a_frame() -> None:
    assert FrameBuffer().feed(framed(b"") + framed(b"x")) == [b"", b"x"]


def test_a_frame_longer_than_the_limit_is_refused_before_it_arrives() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        FrameBuffer().feed((MAX_FRAME + 1).to_bytes(4, "big"))


async def test_a_gateway_that_stops_sending_still_gets_every_reply_before_the_close(
    client: httpx.AsyncClient, tenant: Tenant, writer_side: WriterSide, runtime: Runtime
) -> None:
    records = [record(org_id=tenant.org_id) for _ in range(3)]
    reader, stream = await asyncio.open_unix_connection(writer_side.socket_path)
    stream.write(b"".join(framed(msgspec.msgpack.encode(WriteRequest(n, r, None)))
                          for n, r in enumerate(records)))  # fmt: skip
    stream.write_eof()  # nothing more will come: the writer process may close, after answering
    replies = FrameBuffer().feed(await asyncio.wait_for(reader.read(), 10))
    stream.close()
    decoded = [msgspec.msgpack.decode(frame, type=WriteReply) for frame in replies]
    assert sorted((reply.id, reply.outcome) for reply in decoded) == [
        (0, "stored"),
        (1, "stored"),
        (2, "stored"),
    ]
    assert runtime.executions.count(tenant.org_id) == 3
