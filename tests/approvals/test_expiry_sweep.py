"""The expiry sweep: expired approvals get their final receipt once, with nobody asking.

Real databases (SQLite, and PostgreSQL when configured); the clock is the app's
injected one, moved by the test; the sweeps' passes are run by the test.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import func, select

from execauth.api.app import create_app
from execauth.approvals import State, Vote
from execauth.serving.runtime import Runtime
from execauth.store.approvals import ApprovalStore
from execauth.store.executions import ExecutionRecord
from execauth.store.tables import executions
from execauth.usecases.approval_sweep import ApprovalSweep
from execauth.usecases.execute import ExecutionService
from tests.approvals.conftest import Clock, Org, escalate, make_org

pytestmark = pytest.mark.anyio


def service_of(client: httpx.AsyncClient) -> ExecutionService:
    service: ExecutionService = client._transport.app.state.service  # type: ignore[attr-defined]
    return service


def sweep_for(client: httpx.AsyncClient, clock: Clock, **options: Any) -> ApprovalSweep:
    """A sweep of its own (its own store and lock handle), as another process would have."""
    service = service_of(client)
    store = ApprovalStore(service.runtime.engine)
    return ApprovalSweep(store, service.issue_outcome, clock=clock, **options)


def outcomes(runtime: Runtime, approval_id: str) -> int:
    """How many final receipts name this approval (there must never be two)."""
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            select(executions.c.receipt).where(executions.c.decision != "ESCALATE")
        ).scalars()
        return sum(1 for receipt in rows if approval_id.encode() in bytes(receipt))


async def state_of(client: httpx.AsyncClient, org: Org, approval_id: str) -> str:
    shown = await client.get(f"/operator/approvals/{approval_id}", headers=org.auditor)
    assert shown.status_code == 200, shown.text
    state: str = shown.json()["state"]
    return state


async def test_two_sweeps_racing_issue_one_expiry_receipt_per_approval(
    client: httpx.AsyncClient, clock: Clock, org: Org, runtime: Runtime
) -> None:
    ids = []
    for _ in range(5):
        ids.append((await escalate(client, org))["approval_id"])
        clock.advance(seconds=1)
    clock.advance(minutes=30)
    sweeps = [sweep_for(client, clock), sweep_for(client, clock)]
    start = threading.Barrier(2)
    results = []

    def run(sweep: ApprovalSweep) -> None:
        start.wait()
        results.append(sweep.run_once())

    threads = [threading.Thread(target=run, args=(s,)) for s in sweeps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [r.failed for r in results] == [0, 0]
    assert [outcomes(runtime, approval_id) for approval_id in ids] == [1] * 5
    for approval_id in ids:
        assert await state_of(client, org, approval_id) == "expired"


async def test_an_approval_not_yet_expired_is_left_pending(
    client: httpx.AsyncClient, clock: Clock, org: Org, runtime: Runtime
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    clock.advance(minutes=29, seconds=59)

    result = sweep_for(client, clock).run_once()

    assert (result.examined, result.settled) == (1, 0)
    assert outcomes(runtime, approval_id) == 0


async def test_a_pass_is_bounded_and_the_next_ones_walk_on_past_pending_ones(
    client: httpx.AsyncClient, clock: Clock, org: Org, runtime: Runtime
) -> None:
    # Four expire; a fifth, made last, is still pending when the passes walk past it.
    expired = []
    for _ in range(4):
        expired.append((await escalate(client, org))["approval_id"])
        clock.advance(seconds=1)
    clock.advance(minutes=30)
    young = (await escalate(client, org))["approval_id"]  # expires 30 minutes from here
    sweep = sweep_for(client, clock, batch=2)

    passes = [sweep.run_once() for _ in range(3)]

    assert [p.examined for p in passes] == [2, 2, 1]
    assert [p.settled for p in passes] == [2, 2, 0]
    assert [outcomes(runtime, a) for a in expired] == [1, 1, 1, 1]
    assert outcomes(runtime, young) == 0
    # The walk starts over: the young one is found once its time has come.
    clock.advance(minutes=30)
    assert sweep.run_once().settled == 1
    assert outcomes(runtime, young) == 1


async def test_a_failed_settlement_is_logged_left_pending_and_retried(
    client: httpx.AsyncClient,
    clock: Clock,
    org: Org,
    runtime: Runtime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    clock.advance(minutes=30)
    service = service_of(client)

    def cannot_sign(
        escalation: dict[str, Any], state: State, votes: list[Vote], now: datetime
    ) -> ExecutionRecord:
        raise RuntimeError("no signing key")

    broken = ApprovalSweep(ApprovalStore(runtime.engine), cannot_sign, clock=clock)
    result = broken.run_once()

    assert (result.settled, result.failed) == (0, 1)
    assert "settling expired approval" in caplog.text
    assert outcomes(runtime, approval_id) == 0
    assert service.approvals.pending(org.tenant.org_id) == [approval_id]
    assert sweep_for(client, clock).run_once().settled == 1
    assert outcomes(runtime, approval_id) == 1


async def test_the_app_sweeps_in_the_background_when_nobody_reads(
    runtime: Runtime, clock: Clock
) -> None:
    runtime.settings.approval_sweep_interval_seconds = 0.05
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            org = await make_org(c)
            approval_id = (await escalate(c, org))["approval_id"]
            clock.advance(minutes=30)
            settled = threading.Event()
            for _ in range(200):  # a bound, not a timing assertion: 10 s at most
                if outcomes(runtime, approval_id) == 1:
                    settled.set()
                    break
                await anyio.sleep(0.05)
    assert settled.is_set()
    with runtime.engine.connect() as conn:
        final = conn.execute(
            select(func.count()).select_from(executions).where(executions.c.decision == "DENY")
        ).scalar_one()
    assert final == 1
