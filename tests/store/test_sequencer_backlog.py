"""On SQLite the sequencer runs between receipt batches on the writer's thread, a
bounded step at a time. A backlog larger than one step must not wait an interval per
step: under sustained load the log would fall further behind every second.

The writer's clock is frozen after one interval, so the test needs no timing: if a
step with more to do waited for the next interval, the backlog would never be done."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from sqlalchemy import func, select

from execauth.config import PlanSettings
from execauth.serving import receipt_writer as writer_module
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.serving.runtime import Runtime
from execauth.serving.sequencer import WRITER_BATCH, Sequencer
from execauth.store.tables import log_leaves
from tests.conftest import Tenant, small_plans

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
INTERVAL = 1.0


@pytest.fixture
def plans() -> dict[str, PlanSettings]:
    return small_plans(free_executes=100_000, per_minute=100_000)


class FrozenClock:
    """The writer module's ``time``: ``monotonic`` moves only when the test moves it."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


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
async def test_a_backlog_of_several_steps_is_sequenced_within_one_interval(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
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
    clock = FrozenClock()
    monkeypatch.setattr(writer_module, "time", clock)
    sequencer = Sequencer(
        runtime.logs, runtime.keyring, "https://execauth.test", interval_seconds=INTERVAL
    )
    sequencer.start(runtime.writer)
    clock.now += INTERVAL  # the first step is due; the clock stops here
    # Four steps in all; with the clock stopped, only back-to-back steps get there. The
    # wait is a guard against a hang, not a measurement.
    assert await asyncio.to_thread(wait_until_sequenced, runtime, backlog, 30)
