"""The receipt writer's group commit, on SQLite (WAL, synchronous=FULL) and PostgreSQL.

Each round hands ``batch`` records to ``ReceiptWriter.write`` at once (as that many
concurrent requests would) and waits until every one is committed. The writer
thread takes all queued records into one transaction, so one round is one commit
(one fsync) of ``batch`` rows; ``on_commit`` checks that it really was. Every
record carries an idempotency key and a metered quota, as the gateway's do.

Besides the wall time, ``writer_cpu_per_row_us`` is the CPU time of the writer
thread alone per stored row: under load the server is GIL-bound, and that is the
share of the interpreter each receipt costs there. PostgreSQL runs when
``EXECAUTH_TEST_POSTGRES_URL`` is set (in a schema of its own, dropped afterwards).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from execauth.serving.receipt_writer import ReceiptWriter
from execauth.store.control import ControlStore
from execauth.store.database import make_engine, normalize_url, upgrade
from execauth.store.execution_writes import (
    insert_batch,
    insert_execution,
    store_in_one_statement,
)
from execauth.store.executions import ExecutionRecord
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org
from execauth.tenancy.quota import QuotaCheck

from .conftest import BODY, NOW

ORG_ID = "org_01bench"
RECEIPT = msgspec.json.encode({"receipt_id": "x" * 29, "pad": "y" * 900})  # ~1 KB, like a real one
# Metered, as every gateway write is, with a limit the benchmark never reaches.
QUOTA = QuotaCheck("bench", "2026-11", 10**9, datetime(2026, 12, 1, tzinfo=UTC))
POSTGRES_URL = os.environ.get("EXECAUTH_TEST_POSTGRES_URL")
BACKENDS = ["sqlite", "postgres"]
_ids = itertools.count()


@contextmanager
def bench_database(backend: str, directory: Path, org_ids: list[str]) -> Iterator[Engine]:
    """A migrated database on ``backend`` holding ``org_ids``; skips PostgreSQL when unset."""
    schema = None
    admin: Engine | None = None
    if backend == "postgres":
        if not POSTGRES_URL:
            pytest.skip("PostgreSQL benchmarks need EXECAUTH_TEST_POSTGRES_URL")
        schema = "bench_" + secrets.token_hex(6)
        admin = create_engine(normalize_url(POSTGRES_URL))
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        engine = make_engine(POSTGRES_URL, schema=schema)
    else:
        engine = make_engine(f"sqlite:///{directory / 'bench.db'}")
    try:
        upgrade(engine)
        control = ControlStore(engine)
        for org_id in org_ids:
            org = Org(org_id, "Bench", "bench", "a", NOW)
            control.create_org(org, AuditEvent(org_id, NOW, "bench", "org.created", org_id))
        yield engine
    finally:
        engine.dispose()
        if admin is not None:
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            admin.dispose()


@pytest.fixture(scope="module", params=BACKENDS)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    with bench_database(request.param, tmp_path_factory.mktemp("writer"), [ORG_ID]) as engine:
        yield engine


def record(org_id: str = ORG_ID, receipt: bytes = RECEIPT) -> ExecutionRecord:
    n = next(_ids)
    return ExecutionRecord(
        execution_id=f"service_exec_{n:026d}_{secrets.token_hex(4)}",
        receipt_id=f"service_rcpt_{secrets.token_hex(8)}",
        org_id=org_id,
        idempotency_key=f"bench-{n}-{secrets.token_hex(4)}",
        request_digest="sha256:" + "0" * 64,
        surface="deploy.production",
        actor="release-bot",
        decision="PERMIT",
        policy_id="bench",
        policy_version=1,
        rule_id="release-from-main",
        reason=None,
        decided_at_ms=int(NOW.timestamp() * 1000),
        evaluation_input=msgspec.json.encode({"request": BODY}).decode(),
        receipt=receipt,
    )


def thread_cpu_seconds(name: str) -> float:
    """CPU time so far of the live thread called ``name``."""
    (thread,) = [t for t in threading.enumerate() if t.name == name]
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


@pytest.mark.parametrize("batch", [1, 32, 256])
def test_group_commit(benchmark: Any, engine: Engine, batch: int) -> None:
    commits: list[int] = []
    writer = ReceiptWriter(engine, max_batch=512, on_commit=lambda n, _s: commits.append(n))
    writer.start()
    loop = asyncio.new_event_loop()
    try:

        def setup() -> tuple[tuple[list[ExecutionRecord]], dict[str, Any]]:
            return ([record() for _ in range(batch)],), {}

        async def write_all(records: list[ExecutionRecord]) -> None:
            # Queue every record before yielding to the writer, as one burst of requests.
            results = await asyncio.gather(*(writer.write(r, QUOTA) for r in records))
            assert results == [None] * len(records)  # every one stored, none a repeat

        def commit(records: list[ExecutionRecord]) -> None:
            loop.run_until_complete(write_all(records))

        rounds = 60 if batch < 256 else 30
        cpu_before = thread_cpu_seconds("execauth-writer")
        benchmark.pedantic(commit, setup=setup, rounds=rounds, warmup_rounds=2)
        writer_cpu = thread_cpu_seconds("execauth-writer") - cpu_before
    finally:
        writer.stop()
        loop.close()
    # One commit per round, or close to it (the writer may start on a round's first record).
    benchmark.extra_info["rows_per_commit"] = sum(commits) / len(commits)
    benchmark.extra_info["per_row_us"] = benchmark.stats.stats.median / batch * 1e6
    benchmark.extra_info["writer_cpu_per_row_us"] = writer_cpu / ((rounds + 2) * batch) * 1e6


@pytest.mark.parametrize("batch", [1, 32, 256])
def test_insert_batch(benchmark: Any, engine: Engine, batch: int) -> None:
    """What the writer thread runs per batch (``_insert``), without the queue and threads.

    ``cpu_per_row_us`` times the statements alone, not the commit: on SQLite the
    commit's fsync counts as the thread's (system) CPU time, and it is not Python.
    """
    cpu: list[float] = []

    def setup() -> tuple[tuple[list[ExecutionRecord]], dict[str, Any]]:
        return ([record() for _ in range(batch)],), {}

    def store(records: list[ExecutionRecord]) -> None:
        with engine.begin() as conn:
            started = time.thread_time()
            if batch == 1:
                outcomes = [insert_execution(conn, records[0], QUOTA)]
            else:
                outcomes = insert_batch(conn, [(r, QUOTA) for r in records])
            cpu.append(time.thread_time() - started)
        assert outcomes == [None] * batch

    benchmark.pedantic(store, setup=setup, rounds=200 if batch < 256 else 40, warmup_rounds=2)
    cpu.sort()
    benchmark.extra_info["per_row_us"] = benchmark.stats.stats.median / batch * 1e6
    benchmark.extra_info["cpu_per_row_us"] = cpu[len(cpu) // 2] / batch * 1e6


# The self-hosted default plan (counted, never refused) and a plan with a limit far off.
UNMETERED = QuotaCheck("unmetered", "2026-11", None, datetime(2026, 12, 1, tzinfo=UTC))
LIMITED = QuotaCheck("limited", "2026-11", 10**9, datetime(2026, 12, 1, tzinfo=UTC))


@pytest.mark.parametrize("quota", [UNMETERED, LIMITED], ids=lambda quota: quota.plan)
@pytest.mark.parametrize("batch", [1, 32, 256])
def test_store_in_one_statement(
    benchmark: Any, engine: Engine, batch: int, quota: QuotaCheck
) -> None:
    """What the writer runs per batch on PostgreSQL: one statement on a connection in
    autocommit, its own transaction (commit included), the limit checked in its lock."""
    if engine.dialect.name != "postgresql":
        pytest.skip("one statement a batch is PostgreSQL's path")
    with engine.begin() as conn:  # the counter row, as a month's first execute creates it
        assert insert_batch(conn, [(record(), quota)]) == [None]
    cpu: list[float] = []

    def setup() -> tuple[tuple[list[ExecutionRecord]], dict[str, Any]]:
        return ([record() for _ in range(batch)],), {}

    with engine.connect() as connection:
        conn = connection.execution_options(isolation_level="AUTOCOMMIT")

        def store(records: list[ExecutionRecord]) -> None:
            started = time.thread_time()
            with conn.begin():
                stored = store_in_one_statement(conn, [(r, quota) for r in records])
            cpu.append(time.thread_time() - started)
            assert stored == {r.execution_id for r in records}

        benchmark.pedantic(store, setup=setup, rounds=200 if batch < 256 else 40, warmup_rounds=2)
    cpu.sort()
    benchmark.extra_info["per_row_us"] = benchmark.stats.stats.median / batch * 1e6
    benchmark.extra_info["cpu_per_row_us"] = cpu[len(cpu) // 2] / batch * 1e6


def a_large_request(size: int) -> str:
    """A plan-like request of about ``size`` bytes: repeated structure, ids that do not
    repeat (what an infrastructure change or an agent's tool call carries)."""
    changes: list[dict[str, str]] = []
    length = 0
    while length < size:
        n = len(changes)
        changes.append({"address": f"module.web[{n}].aws_instance.app", "ami": f"ami-{n:032x}"})
        length += len(msgspec.json.encode(changes[-1])) + 1
    return msgspec.json.encode({"request": {**BODY, "payload": {"changes": changes}}}).decode()


def backend_cpu_seconds(conn: Connection) -> float:
    """CPU time so far of the PostgreSQL backend serving ``conn`` (same host)."""
    pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("size", [16 * 1024, 60 * 1024], ids=["16KiB", "60KiB"])
def test_store_large_requests(benchmark: Any, engine: Engine, size: int) -> None:
    """A batch of 12 requests of ``size`` bytes through ``insert_batch``: on PostgreSQL
    the rows are compressed before they are stored (LZ4 since migration 0015), and
    ``backend_cpu_per_row_us`` is the database's share of the cost."""
    request = a_large_request(size)

    def setup() -> tuple[tuple[list[ExecutionRecord]], dict[str, Any]]:
        return ([dataclasses.replace(record(), evaluation_input=request) for _ in range(12)],), {}

    with engine.connect() as conn:
        postgres = engine.dialect.name == "postgresql"
        backend_before = backend_cpu_seconds(conn) if postgres else 0.0
        conn.commit()

        def store(records: list[ExecutionRecord]) -> None:
            with conn.begin():
                assert insert_batch(conn, [(r, QUOTA) for r in records]) == [None] * 12

        rounds = 100
        benchmark.pedantic(store, setup=setup, rounds=rounds, warmup_rounds=2)
        if postgres:
            backend = backend_cpu_seconds(conn) - backend_before
            conn.commit()
            benchmark.extra_info["backend_cpu_per_row_us"] = backend / ((rounds + 2) * 12) * 1e6
    benchmark.extra_info["request_bytes"] = len(request)
    benchmark.extra_info["per_row_us"] = benchmark.stats.stats.median / 12 * 1e6
