"""API key lifecycle (docs/api.md): rotate with a grace period, revoke, last use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from execauth.api.app import create_app
from execauth.serving.runtime import Runtime
from tests.conftest import ADMIN, Tenant, make_tenant

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    """The app on a clock the test moves, so grace periods end without sleeping."""
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


async def rotate(client: httpx.AsyncClient, tenant: Tenant, **body: object) -> httpx.Response:
    return await client.post(
        f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}/rotate", json=body, headers=ADMIN
    )


async def status_with(client: httpx.AsyncClient, secret: str) -> int:
    response = await client.post(
        "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
    )
    return response.status_code


async def test_rotation_returns_a_new_working_secret_for_the_same_key(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await rotate(client, tenant)
    assert response.status_code == 200
    body = response.json()
    assert body["key_id"] == tenant.key_id
    assert body["api_key"] != tenant.api_key
    assert await status_with(client, body["api_key"]) == 200


async def test_old_secret_keeps_working_during_the_default_24h_grace(
    client: httpx.AsyncClient, tenant: Tenant, clock: Clock
) -> None:
    rotated_at = clock.now
    body = (await rotate(client, tenant)).json()
    assert body["previous_valid_until"] is not None
    clock.now = rotated_at + timedelta(hours=23, minutes=59)
    assert await status_with(client, tenant.api_key) == 200


async def test_old_secret_is_401_once_the_grace_period_ends(
    client: httpx.AsyncClient, tenant: Tenant, clock: Clock
) -> None:
    rotated_at = clock.now
    new_secret = (await rotate(client, tenant, grace_seconds=600)).json()["api_key"]
    clock.now = rotated_at + timedelta(seconds=601)
    assert await status_with(client, tenant.api_key) == 401
    assert await status_with(client, new_secret) == 200


async def test_rotating_with_zero_grace_cuts_the_old_secret_at_once(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await rotate(client, tenant, grace_seconds=0)
    assert await status_with(client, tenant.api_key) == 401


async def test_rotating_twice_ends_the_first_secrets_grace(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    second = (await rotate(client, tenant)).json()["api_key"]
    third = (await rotate(client, tenant)).json()["api_key"]
    assert await status_with(client, tenant.api_key) == 401
    assert await status_with(client, second) == 200
    assert await status_with(client, third) == 200


@pytest.mark.parametrize("grace", [-1, 31 * 86400], ids=["negative", "over-30-days"])
async def test_grace_outside_0_to_30_days_is_refused(
    client: httpx.AsyncClient, tenant: Tenant, grace: int
) -> None:
    assert (await rotate(client, tenant, grace_seconds=grace)).status_code == 400


async def test_a_revoked_key_cannot_be_rotated_back_to_life(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.delete(f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}", headers=ADMIN)
    assert (await rotate(client, tenant)).status_code == 404


async def test_revocation_ends_the_rotated_out_secret_too(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    new_secret = (await rotate(client, tenant)).json()["api_key"]
    await client.delete(f"/console/v1/orgs/{tenant.org_id}/keys/{tenant.key_id}", headers=ADMIN)
    assert await status_with(client, tenant.api_key) == 401
    assert await status_with(client, new_secret) == 401


async def test_an_expired_key_is_401(client: httpx.AsyncClient, clock: Clock) -> None:
    expires = (clock.now + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    tenant = await make_tenant(client, expires_at=expires)
    assert await status_with(client, tenant.api_key) == 200
    clock.now += timedelta(hours=1, seconds=1)
    assert await status_with(client, tenant.api_key) == 401


async def test_last_used_time_is_recorded(
    client: httpx.AsyncClient, tenant: Tenant, clock: Clock
) -> None:
    await status_with(client, tenant.api_key)
    keys = (await client.get(f"/console/v1/orgs/{tenant.org_id}/keys", headers=ADMIN)).json()
    (key,) = keys["keys"]
    assert key["last_used_at"] is not None
    used = datetime.fromisoformat(key["last_used_at"].replace("Z", "+00:00"))
    assert abs(used - clock.now) < timedelta(seconds=1)


async def test_key_listings_never_contain_a_secret(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await rotate(client, tenant)
    listing = await client.get(f"/console/v1/orgs/{tenant.org_id}/keys", headers=ADMIN)
    assert "service_live_" not in listing.text
    assert "api_key" not in listing.json()["keys"][0]
