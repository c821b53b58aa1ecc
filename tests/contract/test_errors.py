"""The error table of docs/api.md ("Errors"), in both wire profiles."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import ADMIN, Tenant, make_tenant

pytestmark = pytest.mark.anyio

GOOD = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def assert_flat_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code
    assert isinstance(body["message"], str)
    assert body["message"]
    assert body["request_id"].startswith("req_")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"actor": "a"}, "surface"),
        ({"surface": ""}, "surface"),
        ({"surface": 7}, "surface"),
        ({"surface": "deploy"}, "surface"),
        ({"surface": "Deploy.Production"}, "surface"),
        ({"surface": "deploy." + "x" * 130}, "surface"),
        ({"surface": "deploy.production", "actor": 5}, "actor"),
        ({"surface": "deploy.production", "action": ["x"]}, "action"),
        ({"surface": "deploy.production", "context": "x"}, "context"),
        ({"surface": "deploy.production", "metadata": 1}, "metadata"),
        ({"surface": "deploy.production", "payload": [1]}, "payload"),
        ({"surface": "deploy.production", "request_id": 1}, "request_id"),
    ],
)
async def test_malformed_body_is_400_naming_the_field(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any], field: str
) -> None:
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert_flat_error(response, 400, "invalid_request")
    assert field in response.json()["message"]


async def test_non_json_body_is_400(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.post(
        "/v1/execute",
        content=b"surface=deploy",
        headers={**tenant.auth, "content-type": "application/json"},
    )
    assert_flat_error(response, 400, "invalid_request")


async def test_json_that_is_not_an_object_is_400(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.post("/v1/execute", json=["deploy.production"], headers=tenant.auth)
    assert_flat_error(response, 400, "invalid_request")


async def test_same_context_key_with_different_metadata_value_is_400(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**GOOD, "metadata": {"branch": "dev"}}
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert_flat_error(response, 400, "invalid_request")


async def test_two_different_idempotency_keys_are_400(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post(
        "/v1/execute",
        json={**GOOD, "request_id": "a"},
        headers={**tenant.auth, "Idempotency-Key": "b"},
    )
    assert_flat_error(response, 400, "invalid_request")


async def test_idempotency_key_over_255_characters_is_400(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post(
        "/v1/execute", json={**GOOD, "request_id": "k" * 256}, headers=tenant.auth
    )
    assert_flat_error(response, 400, "invalid_request")


async def test_body_over_64_kib_is_413(client: httpx.AsyncClient, tenant: Tenant) -> None:
    body = {**GOOD, "payload": {"blob": "x" * (64 * 1024)}}
    response = await client.post("/v1/execute", json=body, headers=tenant.auth)
    assert_flat_error(response, 413, "payload_too_large")


async def test_chunked_body_over_64_kib_is_413_without_content_length(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    async def chunks() -> Any:
        yield b'{"surface": "deploy.production", "payload": {"blob": "'
        for _ in range(70):
            yield b"x" * 1024
        yield b'"}}'

    response = await client.post(
        "/v1/execute",
        content=chunks(),
        headers={**tenant.auth, "content-type": "application/json"},
    )
    assert_flat_error(response, 413, "payload_too_large")


async def test_missing_api_key_is_401(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.post("/v1/execute", json=GOOD)
    assert_flat_error(response, 401, "unauthorized")


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer not-a-key",
        "Basic c2VydmljZV9saXZlXw==",
        "Bearer service_live_",
        "Bearer service_live_" + "A" * 49,
    ],
)
async def test_malformed_api_key_is_401(
    client: httpx.AsyncClient, tenant: Tenant, authorization: str
) -> None:
    response = await client.post("/v1/execute", json=GOOD, headers={"Authorization": authorization})
    assert_flat_error(response, 401, "unauthorized")


async def test_well_formed_but_unknown_api_key_is_401(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    from execauth.tenancy.api_keys import generate_secret

    headers = {"Authorization": f"Bearer {generate_secret()}"}
    response = await client.post("/v1/execute", json=GOOD, headers=headers)
    assert_flat_error(response, 401, "unauthorized")


async def test_revoked_api_key_is_401(client: httpx.AsyncClient, tenant: Tenant) -> None:
    assert (await client.post("/v1/execute", json=GOOD, headers=tenant.auth)).status_code == 200
    revoked = await client.delete(
        f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}", headers=ADMIN
    )
    assert revoked.status_code == 204
    response = await client.post("/v1/execute", json=GOOD, headers=tenant.auth)
    assert_flat_error(response, 401, "unauthorized")


async def test_surface_outside_the_keys_patterns_is_403_forbidden(
    client: httpx.AsyncClient,
) -> None:
    tenant = await make_tenant(client, surfaces=["deploy.staging"])
    response = await client.post("/v1/execute", json=GOOD, headers=tenant.auth)
    assert_flat_error(response, 403, "forbidden")


async def test_key_without_execute_role_is_403_forbidden(client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(client, role="auditor")
    response = await client.post("/v1/execute", json=GOOD, headers=tenant.auth)
    assert_flat_error(response, 403, "forbidden")


async def test_surface_no_policy_governs_is_404_surface_not_found(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post(
        "/v1/execute", json={"surface": "payments.transfer"}, headers=tenant.auth
    )
    assert_flat_error(response, 404, "surface_not_found")


async def test_wrong_method_is_405_method_not_allowed(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/execute")
    assert_flat_error(response, 405, "method_not_allowed")
    assert "POST" in response.headers["allow"]


async def test_profile_b_errors_are_nested(client: httpx.AsyncClient, tenant: Tenant) -> None:
    response = await client.post("/v1/execute", json={}, headers={"Prefer": "wire=b"})
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == "unauthorized"
    assert error["message"]
    assert error["request_id"].startswith("req_")
    assert response.headers["preference-applied"] == "wire=b"


async def test_org_profile_b_nests_errors_without_a_prefer_header(
    client: httpx.AsyncClient,
) -> None:
    tenant = await make_tenant(client, wire_profile="b")
    response = await client.post("/v1/execute", json={"actor": "x"}, headers=tenant.auth)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("depth", [65, 5000], ids=["just-over-the-limit", "stack-deep"])
async def test_deeply_nested_bodies_are_400_not_500(
    client: httpx.AsyncClient, tenant: Tenant, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    body = '{"surface": "deploy.production", "payload": {"x": ' + nested + "}}"
    response = await client.post(
        "/v1/execute",
        content=body,
        headers={**tenant.auth, "content-type": "application/json"},
    )
    assert_flat_error(response, 400, "invalid_request")


async def test_brackets_inside_strings_do_not_make_a_body_deep(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = '{"surface": "deploy.staging", "payload": {"amount": 2, "x": "' + "[{" * 100 + '"}}'
    response = await client.post(
        "/v1/execute",
        content=body,
        headers={**tenant.auth, "content-type": "application/json"},
    )
    assert response.status_code == 200


@pytest.mark.parametrize("depth", [64, 65])
async def test_the_depth_limit_holds_at_the_bracket_count_s_edge(
    client: httpx.AsyncClient, tenant: Tenant, depth: int
) -> None:
    # Exactly as many brackets as levels: the walk decides, not the count.
    body = "[" * (depth - 1) + '{"surface": "deploy.staging"}' + "]" * (depth - 1)
    response = await client.post(
        "/v1/execute",
        content=body,
        headers={**tenant.auth, "content-type": "application/json"},
    )
    if depth > 64:
        assert_flat_error(response, 400, "invalid_request")
        assert "nests deeper" in response.json()["message"]
    else:
        assert response.json()["message"] == "request body must be a JSON object"


async def test_nesting_up_to_the_limit_is_accepted(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    nested = "[" * 60 + "]" * 60
    body = '{"surface": "deploy.staging", "payload": {"amount": 2, "x": ' + nested + "}}"
    response = await client.post(
        "/v1/execute",
        content=body,
        headers={**tenant.auth, "content-type": "application/json"},
    )
    assert response.status_code == 200
