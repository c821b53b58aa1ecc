"""Wire profiles A and B and idempotent repeats (docs/api.md, "The answer", "Idempotency")."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import Tenant, make_tenant

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
DENY = {**PERMIT, "context": {"branch": "feature"}}
SILENCE = {"surface": "deploy.production", "actor": "release-bot"}


@pytest.mark.parametrize(
    ("body", "status"),
    [(PERMIT, 200), (DENY, 403), (SILENCE, 422)],
    ids=["permit", "deny", "silence"],
)
async def test_profile_b_status_follows_the_decision(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object], status: int
) -> None:
    response = await client.post(
        "/v1/execute", json=body, headers={**tenant.auth, "Prefer": "wire=b"}
    )
    assert response.status_code == status
    assert response.json()["receipt_id"].startswith("service_rcpt_")
    assert response.headers["preference-applied"] == "wire=b"


@pytest.mark.parametrize("body", [PERMIT, DENY, SILENCE], ids=["permit", "deny", "silence"])
async def test_profile_a_answers_200_for_every_decision(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, object]
) -> None:
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert response.status_code == 200


async def test_org_setting_b_applies_without_prefer(client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(client, wire_profile="b")
    response = await client.post("/v1/execute", json=DENY, headers=tenant.auth)
    assert response.status_code == 403


async def test_prefer_wire_a_overrides_an_org_on_profile_b(client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(client, wire_profile="b")
    response = await client.post(
        "/v1/execute", json=DENY, headers={**tenant.auth, "Prefer": "wire=a"}
    )
    assert response.status_code == 200
    assert response.headers["preference-applied"] == "wire=a"


@pytest.mark.parametrize("where", ["request_id", "idempotency_key", "header"])
async def test_repeat_with_same_key_returns_the_byte_identical_receipt(
    client: httpx.AsyncClient, tenant: Tenant, where: str
) -> None:
    body: dict[str, object] = dict(PERMIT)
    headers = dict(tenant.auth)
    if where == "header":
        headers["Idempotency-Key"] = "deploy-42"
    else:
        body[where] = "deploy-42"
    first = await client.post("/v1/execute", json=body, headers=headers)
    second = await client.post("/v1/execute", json=body, headers=headers)
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers


async def test_repeat_of_a_deny_returns_the_same_deny(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**DENY, "request_id": "d-1"}
    first = await client.post("/v1/execute", json=body, headers=tenant.auth)
    second = await client.post(
        "/v1/execute", json=body, headers={**tenant.auth, "Prefer": "wire=b"}
    )
    assert first.content == second.content
    assert second.status_code == 403


async def test_reused_key_with_a_different_request_is_409(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.post("/v1/execute", json={**PERMIT, "request_id": "k"}, headers=tenant.auth)
    response = await client.post(
        "/v1/execute", json={**DENY, "request_id": "k"}, headers=tenant.auth
    )
    assert response.status_code == 409
    assert response.json()["error"] == "idempotency_conflict"


async def test_idempotency_keys_are_scoped_to_the_organization(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    other = await make_tenant(client)
    body = {**PERMIT, "request_id": "shared"}
    mine = await client.post("/v1/execute", json=body, headers=tenant.auth)
    theirs = await client.post("/v1/execute", json=body, headers=other.auth)
    assert mine.json()["org_id"] == tenant.org_id
    assert theirs.json()["org_id"] == other.org_id
    assert mine.json()["receipt_id"] != theirs.json()["receipt_id"]


async def test_concurrent_repeats_store_one_receipt(
    client: httpx.AsyncClient, tenant: Tenant, runtime: object
) -> None:
    body = {**PERMIT, "request_id": "race"}
    responses = await asyncio.gather(
        *(client.post("/v1/execute", json=body, headers=tenant.auth) for _ in range(20))
    )
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1
    from execauth.serving.runtime import Runtime

    assert isinstance(runtime, Runtime)
    assert runtime.executions.count(tenant.org_id) == 1


async def test_repeat_is_answered_even_after_the_surface_lost_its_policy(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    from tests.conftest import ADMIN

    body = {**PERMIT, "request_id": "before-change"}
    first = await client.post("/v1/execute", json=body, headers=tenant.auth)
    other_surfaces = (
        "surfaces:\n  - match: deploy.staging\n    rules:\n      - id: a\n        permit: 'true'\n"
    )
    published = await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content=other_surfaces, headers=ADMIN
    )
    assert published.status_code == 201
    second = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert second.status_code == 200
    assert second.content == first.content
