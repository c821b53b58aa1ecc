"""Concurrent approvals from two instances (two engines) on one database: exactly one outcome."""

from __future__ import annotations

import threading

import httpx
import pytest
from sqlalchemy import func, select

from execauth.errors import ApprovalClosed
from execauth.serving.runtime import Runtime
from execauth.store.approvals import Approval, ApprovalStore, Ballot
from execauth.store.database import make_engine
from execauth.store.tables import approval_votes, executions
from execauth.usecases.execute import ExecutionService
from tests.approvals.conftest import Clock, Org, escalate
from tests.conftest import Database

pytestmark = pytest.mark.anyio


async def test_two_instances_approving_at_once_issue_exactly_one_permit(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, database: Database, clock: Clock
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    issuer = ExecutionService(runtime, clock=clock)
    engines = [make_engine(runtime.settings.database_url, schema=database.schema) for _ in "ab"]
    stores = [ApprovalStore(engine) for engine in engines]
    start = threading.Barrier(2)
    results: list[Approval | Exception] = []

    def approve(store: ApprovalStore, key_id: str) -> None:
        start.wait()
        try:
            ballot = Ballot(key_id, "admin", "approve", None, "")
            results.append(
                store.vote(org.tenant.org_id, approval_id, ballot, clock(), issuer.issue_outcome)
            )
        except Exception as exc:
            results.append(exc)

    threads = [
        threading.Thread(target=approve, args=(store, key_id))
        for store, key_id in zip(stores, org.ids, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for engine in engines:
        engine.dispose()

    assert sum(isinstance(r, Approval) for r in results) == 1
    assert sum(isinstance(r, ApprovalClosed) for r in results) == 1
    with runtime.engine.connect() as conn:
        permits = conn.execute(
            select(func.count()).where(
                executions.c.org_id == org.tenant.org_id, executions.c.decision == "PERMIT"
            )
        ).scalar_one()
        votes = conn.execute(select(func.count()).select_from(approval_votes)).scalar_one()
    assert (permits, votes) == (1, 1)
