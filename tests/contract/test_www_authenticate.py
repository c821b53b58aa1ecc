"""401 answers name the Bearer scheme (RFC 6750 §3), so clients and proxies know what to send."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Tenant

pytestmark = pytest.mark.anyio

GOOD = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


async def test_401_without_credentials_carries_www_authenticate_bearer(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/v1/execute", json=GOOD)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_401_for_a_bad_key_says_invalid_token(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    headers = {"Authorization": "Bearer not-a-key"}
    response = await client.post("/v1/execute", json=GOOD, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


async def test_console_401_carries_www_authenticate_bearer(client: httpx.AsyncClient) -> None:
    response = await client.get("/console/v1/orgs")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


async def test_other_errors_carry_no_www_authenticate(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/v1/execute", json={"actor": "a"}, headers=tenant.auth)
    assert response.status_code == 400
    assert "WWW-Authenticate" not in response.headers
