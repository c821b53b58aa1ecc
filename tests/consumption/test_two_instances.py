"""Two instances (two runtimes, two apps, two connection pools) on one database: a PERMIT
consumed at once through both is consumed exactly once, and the loser learns by whom."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import func, select

from execauth.config import Settings
from execauth.serving.runtime import Runtime, open_runtime
from execauth.store.consumptions import receipt_consumptions
from tests.approvals.conftest import Clock
from tests.conftest import Database
from tests.consumption.conftest import Org, consume, permit, serve

pytestmark = pytest.mark.anyio


async def test_two_instances_consuming_at_once_record_exactly_one_consumption(
    client: httpx.AsyncClient,
    org: Org,
    runtime: Runtime,
    settings: Settings,
    database: Database,
    clock: Clock,
) -> None:
    receipts = [await permit(client, org) for _ in range(5)]
    second_runtime = open_runtime(settings, schema=database.schema)
    try:
        async for other in serve(second_runtime, clock):
            # Per receipt, three consumers on each instance, all at once.
            answers = await asyncio.gather(
                *(
                    consume(instance, r["receipt_id"], org.executor, actor=f"{name}-{i}")
                    for r in receipts
                    for name, instance in (("a", client), ("b", other))
                    for i in range(3)
                )
            )
    finally:
        second_runtime.stop()

    for n, receipt in enumerate(receipts):
        mine = answers[n * 6 : (n + 1) * 6]
        assert sorted(a.status_code for a in mine) == [200, 409, 409, 409, 409, 409], receipt
        winner = next(a.json() for a in mine if a.status_code == 200)
        assert all(a.json()["details"] == [winner] for a in mine if a.status_code == 409)
    with runtime.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(receipt_consumptions)).scalar_one()
    assert stored == len(receipts)
