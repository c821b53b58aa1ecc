"""Usage and metering (docs/api.md): executes per month by decision and surface, and export."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from execauth.tenancy.quota import month_period
from tests.conftest import ADMIN, Tenant, make_tenant

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DENY = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "dev"}}
SILENCE = {"surface": "deploy.production", "actor": "release-bot"}
STAGING = {"surface": "deploy.staging", "payload": {"amount": 2}}


async def send(client: httpx.AsyncClient, tenant: Tenant, *bodies: object) -> None:
    for body in bodies:
        response = await client.post("/v1/execute", json=body, headers=tenant.auth)
        assert response.status_code == 200, response.text


async def usage(client: httpx.AsyncClient, org_id: str, **params: str) -> httpx.Response:
    return await client.get(f"/console/v1/orgs/{org_id}/usage", params=params, headers=ADMIN)


async def test_usage_counts_executes_by_decision_and_surface(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await send(client, tenant, PERMIT, PERMIT, DENY, SILENCE, STAGING)
    report = (await usage(client, tenant.org_id)).json()
    assert report["executes"]["total"] == 5
    assert report["executes"]["by_decision"] == {"PERMIT": 3, "DENY": 1, "SILENCE": 1}
    assert report["executes"]["by_surface"]["deploy.production"] == {
        "PERMIT": 2,
        "DENY": 1,
        "SILENCE": 1,
        "total": 4,
    }


async def test_usage_shows_quota_left_on_the_plan(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await send(client, tenant, PERMIT, DENY)
    quota = (await usage(client, tenant.org_id)).json()["quota"]
    assert (quota["limit"], quota["used"], quota["remaining"]) == (1000, 2, 998)


async def test_idempotent_repeats_are_not_usage(client: httpx.AsyncClient, tenant: Tenant) -> None:
    headers = {**tenant.auth, "Idempotency-Key": "once"}
    for _ in range(3):
        await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert (await usage(client, tenant.org_id)).json()["executes"]["total"] == 1


async def test_another_month_has_no_usage(client: httpx.AsyncClient, tenant: Tenant) -> None:
    await send(client, tenant, PERMIT)
    report = (await usage(client, tenant.org_id, month="2020-01")).json()
    assert report["executes"]["total"] == 0
    assert report["month"] == "2020-01"


@pytest.mark.parametrize("month", ["2026-13", "2026-1", "november"])
async def test_a_malformed_month_is_400(
    client: httpx.AsyncClient, tenant: Tenant, month: str
) -> None:
    assert (await usage(client, tenant.org_id, month=month)).status_code == 400


async def test_export_has_one_line_per_org_for_billing(client: httpx.AsyncClient) -> None:
    busy, idle = await make_tenant(client), await make_tenant(client)
    await send(client, busy, PERMIT, DENY)
    month = month_period(datetime.now(UTC))
    export = (await client.get("/console/v1/usage", params={"month": month}, headers=ADMIN)).json()
    lines = {line["org_id"]: line for line in export["orgs"]}
    assert lines[busy.org_id] | {"name": None} == {
        "org_id": busy.org_id,
        "name": None,
        "plan": "free",
        "executes": 2,
        "permit": 1,
        "deny": 1,
        "silence": 0,
        "quota_limit": 1000,
    }
    assert lines[idle.org_id]["executes"] == 0


async def test_an_org_admin_reads_its_own_usage(client: httpx.AsyncClient, tenant: Tenant) -> None:
    admin = await client.post(
        f"/console/v1/orgs/{tenant.org_id}/keys",
        json={"name": "ops", "role": "admin"},
        headers=ADMIN,
    )
    await send(client, tenant, PERMIT)
    report = await client.get(
        "/operator/usage", headers={"Authorization": f"Bearer {admin.json()['api_key']}"}
    )
    assert report.json()["org_id"] == tenant.org_id
    assert report.json()["executes"]["total"] == 1
