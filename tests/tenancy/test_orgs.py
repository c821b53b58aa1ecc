"""Organizations (docs/api.md): rename, change plan, set wire profile, disable."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ADMIN, Tenant, small_plans

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}

pytestmark = pytest.mark.anyio


async def patch_org(client: httpx.AsyncClient, org_id: str, **changes: object) -> httpx.Response:
    return await client.patch(f"/console/v1/orgs/{org_id}", json=changes, headers=ADMIN)


async def test_renaming_an_org_keeps_its_id(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await patch_org(client, tenant.org_id, name="Acme Payments")
    assert response.status_code == 200
    assert response.json()["org_id"] == tenant.org_id
    shown = await client.get(f"/console/v1/orgs/{tenant.org_id}", headers=ADMIN)
    assert shown.json()["name"] == "Acme Payments"


@pytest.mark.parametrize("plans", [small_plans(free_executes=2)], ids=["free2"])
async def test_upgrading_the_plan_lifts_the_cap_immediately(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for _ in range(2):
        assert (await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)).is_success
    capped = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert capped.status_code == 429

    assert (await patch_org(client, tenant.org_id, plan="standard")).json()["plan"] == "standard"

    lifted = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert lifted.status_code == 200
    assert lifted.json()["decision"] == "PERMIT"


async def test_a_disabled_orgs_keys_answer_401(client: httpx.AsyncClient, tenant: Tenant) -> None:
    assert (await patch_org(client, tenant.org_id, disabled=True)).json()["disabled"] is True
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 401


async def test_re_enabling_an_org_restores_its_keys(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await patch_org(client, tenant.org_id, disabled=True)
    await patch_org(client, tenant.org_id, disabled=False)
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200


async def test_switching_to_wire_profile_b_changes_error_shape_on_the_next_request(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await patch_org(client, tenant.org_id, wire_profile="b")
    response = await client.post("/v1/execute", json={"surface": ""}, headers=tenant.auth)
    assert isinstance(response.json()["error"], dict)


@pytest.mark.parametrize(
    "changes",
    [{"plan": "platinum"}, {"wire_profile": "c"}, {"name": ""}, {"owner": "x"}],
    ids=["unknown-plan", "unknown-profile", "empty-name", "unknown-field"],
)
async def test_invalid_org_changes_are_refused_with_400(
    client: httpx.AsyncClient, tenant: Tenant, changes: dict[str, object]
) -> None:
    response = await patch_org(client, tenant.org_id, **changes)
    assert response.status_code == 400
    shown = await client.get(f"/console/v1/orgs/{tenant.org_id}", headers=ADMIN)
    assert shown.json()["plan"] == "free"


async def test_patching_an_unknown_org_is_404(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await patch_org(client, "org_" + "0" * 26, name="Nobody")
    assert response.status_code == 404


async def test_patching_an_org_needs_the_admin_token(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.patch(
        f"/console/v1/orgs/{tenant.org_id}", json={"plan": "enterprise"}, headers=tenant.auth
    )
    assert response.status_code == 401
