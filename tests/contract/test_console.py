"""The minimal console API: organizations, API keys and policies (admin token)."""

from __future__ import annotations

import hashlib

import httpx
import pytest
import rfc8785

from tests.conftest import ADMIN, DEPLOY_POLICY, Tenant

pytestmark = pytest.mark.anyio


async def test_console_requires_the_admin_token(client: httpx.AsyncClient) -> None:
    response = await client.post("/console/v1/orgs", json={"name": "Acme"})
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    wrong = await client.get("/console/v1/orgs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


async def test_api_key_is_not_an_admin_token(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.get("/console/v1/orgs", headers=tenant.auth)
    assert response.status_code == 401


async def test_create_org_returns_201_with_its_id(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/console/v1/orgs", json={"name": "Acme", "plan": "standard"}, headers=ADMIN
    )
    assert response.status_code == 201
    org = response.json()
    assert org["org_id"].startswith("org_")
    assert org["plan"] == "standard"
    assert org["wire_profile"] == "a"
    shown = await client.get(f"/console/v1/orgs/{org['org_id']}", headers=ADMIN)
    assert shown.json() == org


@pytest.mark.parametrize(
    "body",
    [{}, {"name": ""}, {"name": "A", "plan": "platinum"}, {"name": "A", "wire_profile": "c"},
     {"name": "A", "colour": "red"}, {"name": 5}],
)  # fmt: skip
async def test_invalid_org_is_400(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    response = await client.post("/console/v1/orgs", json=body, headers=ADMIN)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


async def test_unknown_org_is_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/console/v1/orgs/org_nope", headers=ADMIN)
    assert response.status_code == 404


async def test_key_secret_is_shown_once_and_never_listed(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert tenant.api_key.startswith("service_live_")
    listed = await client.get(f"/console/v1/orgs/{tenant.org_id}/keys", headers=ADMIN)
    assert tenant.api_key not in listed.text
    (key,) = listed.json()["keys"]
    assert key["key_id"] == tenant.key_id
    assert "api_key" not in key


async def test_key_secret_is_stored_only_as_a_hash(
    client: httpx.AsyncClient, tenant: Tenant, runtime: object
) -> None:
    from sqlalchemy import text

    from execauth.serving.runtime import Runtime

    assert isinstance(runtime, Runtime)
    with runtime.engine.connect() as conn:
        dump = " ".join(str(row) for row in conn.execute(text("SELECT * FROM api_keys")))
    assert tenant.api_key not in dump
    assert tenant.api_key[len("service_live_") :] not in dump


@pytest.mark.parametrize(
    "spec",
    [{"name": "k", "role": "root"}, {"name": "k", "surfaces": ["Deploy"]},
     {"name": "k", "surfaces": "deploy.*"}, {"name": "k", "expires_at": "2001-01-01T00:00:00Z"},
     {"name": "k", "expires_at": "soon"}],
)  # fmt: skip
async def test_invalid_key_request_is_400(
    client: httpx.AsyncClient, tenant: Tenant, spec: dict[str, object]
) -> None:
    response = await client.post(f"/console/v1/orgs/{tenant.org_id}/keys", json=spec, headers=ADMIN)
    assert response.status_code == 400


async def test_revoking_an_unknown_key_is_404(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.delete(f"/console/v1/orgs/{tenant.org_id}/keys/key_x", headers=ADMIN)
    assert response.status_code == 404


async def test_publishing_returns_version_and_hash_of_the_jcs_document(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    import yaml

    response = await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content=DEPLOY_POLICY, headers=ADMIN
    )
    assert response.status_code == 201
    body = response.json()
    assert body["version"] == 2  # the tenant fixture published version 1
    expected = hashlib.sha256(rfc8785.dumps(yaml.safe_load(DEPLOY_POLICY))).hexdigest()
    assert body["policy_hash"] == "sha256:" + expected


async def test_policy_in_json_is_accepted(client: httpx.AsyncClient, tenant: Tenant) -> None:
    document = {
        "surfaces": [{"match": "data.export", "rules": [{"id": "small", "permit": "true"}]}]
    }
    response = await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/exports", json=document, headers=ADMIN
    )
    assert response.status_code == 201
    decided = await client.post("/v1/execute", json={"surface": "data.export"}, headers=tenant.auth)
    assert decided.json()["decision"] == "PERMIT"


async def test_new_version_takes_effect_immediately(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    deny_all = (
        "surfaces:\n  - match: deploy.production\n    rules:\n"
        "      - id: never\n        deny: 'true'\n"
    )
    published = await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content=deny_all, headers=ADMIN
    )
    assert published.status_code == 201
    body = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
    receipt = (await client.post("/v1/execute", json=body, headers=tenant.auth)).json()
    assert receipt["decision"] == "DENY"
    assert receipt["policy_version"] == 2


async def test_invalid_policy_is_400_with_rule_line_and_reason(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    broken = (
        "surfaces:\n"
        "  - match: deploy.production\n"
        "    rules:\n"
        "      - id: ok\n"
        "        permit: 'true'\n"
        "      - id: broken\n"
        "        deny: context.x ==\n"
    )
    response = await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content=broken, headers=ADMIN
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_request"
    (problem,) = body["details"]
    assert problem["rule_id"] == "broken"
    assert problem["line"] == 7
    assert "compile" in problem["reason"]


async def test_invalid_policy_leaves_the_active_version_in_place(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.put(
        f"/console/v1/orgs/{tenant.org_id}/policies/deploys", content="surfaces: 1", headers=ADMIN
    )
    shown = await client.get(f"/console/v1/orgs/{tenant.org_id}/policies/deploys", headers=ADMIN)
    assert shown.json()["version"] == 1
