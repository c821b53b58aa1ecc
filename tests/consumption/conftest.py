"""An app with an injected clock and an org whose policy permits, denies and escalates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from execauth.api.app import create_app
from execauth.serving.runtime import Runtime
from tests.approvals.conftest import Clock
from tests.conftest import ADMIN, Tenant, make_tenant

POLICY = """
surfaces:
  - match: pay.once
    rules:
      - id: once
        permit: "true"
        single_use: true
        ttl: 5m
  - match: pay.transfer
    rules:
      - id: small
        permit: payload.amount <= 100
        ttl: 5m
      - id: large
        deny: payload.amount > 100
  - match: deploy.production
    rules:
      - id: needs-approval
        escalate: "true"
        approvers: {roles: [admin]}
        quorum: 1
        approval_ttl: 30m
        ttl: 5m
"""


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def serve(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


@pytest.fixture
async def client(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    async for c in serve(runtime, clock):
        yield c


@dataclass
class Org:
    tenant: Tenant
    admin: dict[str, str]
    admin_key_id: str
    auditor: dict[str, str]

    @property
    def executor(self) -> dict[str, str]:
        return self.tenant.auth


async def add_key(
    client: httpx.AsyncClient, org_id: str, **spec: Any
) -> tuple[dict[str, str], str]:
    key = await client.post(f"/console/v1/orgs/{org_id}/keys", json=spec, headers=ADMIN)
    assert key.status_code == 201, key.text
    return {"Authorization": f"Bearer {key.json()['api_key']}"}, key.json()["key_id"]


async def make_org(client: httpx.AsyncClient, *, profile: str = "a") -> Org:
    tenant = await make_tenant(client, policy=POLICY, wire_profile=profile)
    admin, admin_id = await add_key(client, tenant.org_id, name="ops", role="admin")
    auditor, _ = await add_key(client, tenant.org_id, name="audit", role="auditor")
    return Org(tenant, admin, admin_id, auditor)


@pytest.fixture
async def org(client: httpx.AsyncClient) -> Org:
    return await make_org(client)


async def decide(client: httpx.AsyncClient, org: Org, amount: int) -> dict[str, Any]:
    """A receipt for a transfer: PERMIT up to 100, DENY above."""
    answer = await client.post(
        "/v1/execute",
        json={"surface": "pay.transfer", "actor": "agent-7", "payload": {"amount": amount}},
        headers=org.executor,
    )
    assert answer.status_code == 200, answer.text
    receipt: dict[str, Any] = answer.json()
    return receipt


async def permit(client: httpx.AsyncClient, org: Org) -> dict[str, Any]:
    receipt = await decide(client, org, 50)
    assert receipt["decision"] == "PERMIT", receipt
    return receipt


async def consume(
    client: httpx.AsyncClient, receipt_id: str, headers: dict[str, str], **body: Any
) -> httpx.Response:
    return await client.post(
        f"/v1/receipts/{receipt_id}/consume", json=body or None, headers=headers
    )
