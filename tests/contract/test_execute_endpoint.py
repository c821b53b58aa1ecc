"""The execute route's own ASGI answer (api/execute_endpoint.py) says what every JSON
route says: the headers a Starlette response would carry, headers read as Starlette
reads them, and errors rendered by the one error mapping with this request's state."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import Tenant

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")


async def test_a_decision_carries_its_length_type_request_id_and_rate_limit_headers(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    assert re.fullmatch(r"req_[0-9a-f]{16}", response.headers["x-request-id"])
    assert all(response.headers[name].isdigit() for name in RATE_HEADERS)
    assert "idempotent-replayed" not in response.headers


async def test_a_repeat_says_it_is_replayed(client: httpx.AsyncClient, tenant: Tenant) -> None:
    headers = {**tenant.auth, "Idempotency-Key": "endpoint-repeat"}
    await client.post("/v1/execute", json=PERMIT, headers=headers)
    repeat = await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert repeat.headers["idempotent-replayed"] == "true"


async def test_a_repeated_header_counts_by_its_first_value(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = [
        *tenant.auth.items(),
        ("Idempotency-Key", "the-first"),
        ("Idempotency-Key", "the-second"),
    ]
    response = await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert response.status_code == 200
    assert response.json()["request_id"] == "the-first"


async def test_an_error_after_admission_names_the_request_and_carries_the_rate_limit(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/v1/execute", json={"actor": "release-bot"}, headers=tenant.auth)
    assert response.status_code == 400
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert all(response.headers[name].isdigit() for name in RATE_HEADERS)


async def test_an_error_before_admission_carries_no_rate_limit(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/v1/execute", json=PERMIT, headers={"Authorization": "Bearer service_live_nope"}
    )
    assert response.status_code == 401
    assert response.json()["request_id"] == response.headers["x-request-id"]
    assert not any(name in response.headers for name in RATE_HEADERS)


async def test_an_error_in_profile_b_for_an_org_on_b_is_nested(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post(
        "/v1/execute", json={"actor": "x"}, headers={**tenant.auth, "Prefer": "wire=b"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.headers["preference-applied"] == "wire=b"
