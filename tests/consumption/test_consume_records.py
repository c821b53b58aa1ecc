"""A consumption is in the org's audit trail and in the PERMIT's lineage; a refusal is not."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import delete
from sqlalchemy.exc import DBAPIError

from execauth.serving.runtime import Runtime
from execauth.store.consumptions import receipt_consumptions
from tests.consumption.conftest import Org, consume, permit
from tests.web.conftest import sign_in

pytestmark = pytest.mark.anyio


async def test_a_consumption_is_in_the_audit_trail(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await permit(client, org)
    used = await consume(client, receipt["receipt_id"], org.executor, actor="agent-7", note="n1")

    trail = await client.get("/operator/audit", headers=org.admin)

    assert trail.status_code == 200, trail.text
    events = [e for e in trail.json()["events"] if e["action"] == "receipt.consumed"]
    assert len(events) == 1
    assert events[0]["target"] == receipt["receipt_id"]
    assert events[0]["actor"] == f"key:{org.tenant.key_id}"
    assert events[0]["details"] == used.json()


async def test_a_consumption_is_in_the_executions_lineage(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)
    used = await consume(client, receipt["receipt_id"], org.executor, actor="agent-7")

    shown = await client.get(f"/operator/executions/{receipt['execution_id']}", headers=org.admin)

    assert shown.status_code == 200, shown.text
    steps = [s for s in shown.json()["lineage"] if s["kind"] == "receipt_consumed"]
    assert steps == [{"kind": "receipt_consumed", "occurred_at": used.json()["consumed_at"],
                      **used.json()}]  # fmt: skip


async def test_a_refused_second_consumption_records_nothing(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)
    await consume(client, receipt["receipt_id"], org.executor)
    refused = await consume(client, receipt["receipt_id"], org.admin)
    assert refused.status_code == 409

    trail = await client.get("/operator/audit", headers=org.admin)
    shown = await client.get(f"/operator/executions/{receipt['execution_id']}", headers=org.admin)

    assert sum(e["action"] == "receipt.consumed" for e in trail.json()["events"]) == 1
    assert sum(s["kind"] == "receipt_consumed" for s in shown.json()["lineage"]) == 1


async def test_the_database_refuses_to_delete_a_consumption(
    client: httpx.AsyncClient, org: Org, runtime: Runtime
) -> None:
    receipt = await permit(client, org)
    await consume(client, receipt["receipt_id"], org.executor)

    # Deleting the row would make a used receipt usable again: append-only (migration 0009).
    with pytest.raises(DBAPIError, match="append-only"), runtime.engine.begin() as conn:
        conn.execute(delete(receipt_consumptions))


async def test_the_console_execution_page_shows_who_consumed_the_permit(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)
    await consume(client, receipt["receipt_id"], org.executor, actor="agent-7")
    signed_in = await sign_in(client, org.admin["Authorization"].removeprefix("Bearer "))
    assert signed_in.status_code == 303, signed_in.text

    page = await client.get(f"/console/executions/{receipt['execution_id']}")

    assert page.status_code == 200, page.text
    assert "receipt_consumed" in page.text
    assert f"by key {org.tenant.key_id} (agent-7)" in page.text
