"""On SQLite the sequencer runs between receipt batches on the writer's thread, a
bounded step at a time. A backlog larger than one step must not wait an interval per
step: under sustained load the log would fall further behind every second."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from sqlalchemy import func, select

from execauth.config import PlanSettings
from execauth.runtime import Runtime
from execauth.sequencer import WRITER_BATCH, Sequencer
from execauth.store.tables import log_leaves
from execauth.store.writer import ReceiptWriter
from tests.conftest import Tenant, small_plans

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
INTERVAL = 1.0


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    return small_plans(free_executes=100_000, per_minute=100_000)


def sequenced(runtime: Runtime) -> int:
    with runtime.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(log_leaves)).scalar_one())


def wait_until_sequenced(runtime: Runtime, count: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while sequenced(runtime) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# PostgreSQL's sequencer has a thread of its own and loops until nothing is pending.
@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_backlog_of_several_steps_is_sequenced_within_about_one_interval(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    backlog = 3 * WRITER_BATCH + 1
    for chunk in range(0, backlog, 64):
        answers = await asyncio.gather(
            *(
                client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
                for _ in range(min(64, backlog - chunk))
            )
        )
        assert {a.status_code for a in answers} == {200}
    assert sequenced(runtime) == 0
    assert isinstance(runtime.writer, ReceiptWriter)
    sequencer = Sequencer(
        runtime.logs, runtime.keyring, "https://execauth.test", interval_seconds=INTERVAL
    )
    started = time.monotonic()
    sequencer.start(runtime.writer)
    # One step per interval would take four intervals; back-to-back steps take one.
    assert await asyncio.to_thread(wait_until_sequenced, runtime, backlog, 4 * INTERVAL)
    assert time.monotonic() - started < 2.5 * INTERVAL
