"""The receipt writer's group commit on a temporary SQLite file (WAL, synchronous=FULL).

Each round hands ``batch`` records to ``ReceiptWriter.write`` at once (as that many
concurrent requests would) and waits until every one is committed. The writer
thread takes all queued records into one transaction, so one round is one commit
(one fsync) of ``batch`` rows; ``on_commit`` checks that it really was.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sqlalchemy import Engine

from execauth.store.control import ControlStore
from execauth.store.database import make_engine, upgrade
from execauth.store.executions import ExecutionRecord
from execauth.store.writer import ReceiptWriter
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org

from .conftest import BODY, NOW

ORG_ID = "org_01bench"
RECEIPT = msgspec.json.encode({"receipt_id": "x" * 29, "pad": "y" * 900})  # ~1 KB, like a real one
_ids = itertools.count()


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("writer") / "bench.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    org = Org(ORG_ID, "Bench", "bench", "a", NOW)
    ControlStore(engine).create_org(org, AuditEvent(ORG_ID, NOW, "bench", "org.created", ORG_ID))
    yield engine
    engine.dispose()


def record() -> ExecutionRecord:
    n = next(_ids)
    return ExecutionRecord(
        execution_id=f"service_exec_{n:026d}",
        receipt_id=f"service_rcpt_{secrets.token_hex(8)}",
        org_id=ORG_ID,
        idempotency_key=f"bench-{n}",
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
        receipt=RECEIPT,
    )


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
            await asyncio.gather(*(writer.write(r) for r in records))

        def commit(records: list[ExecutionRecord]) -> None:
            loop.run_until_complete(write_all(records))

        benchmark.pedantic(commit, setup=setup, rounds=60 if batch < 256 else 30, warmup_rounds=2)
    finally:
        writer.stop()
        loop.close()
    # One commit per round, or close to it (the writer may start on a round's first record).
    benchmark.extra_info["rows_per_commit"] = sum(commits) / len(commits)
    benchmark.extra_info["per_row_us"] = benchmark.stats.stats.median / batch * 1e6
