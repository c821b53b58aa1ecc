"""An app with an injected clock, an org whose policy escalates, and its keys."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from execauth.api.app import create_app
from execauth.serving.runtime import Runtime
from tests.conftest import ADMIN, Tenant, make_tenant

ESCALATE_POLICY = """
surfaces:
  - match: deploy.production
    rules:
      - id: needs-approval
        escalate: context.env == "prod"
        approvers: {roles: [admin]}
        quorum: QUORUM
        approval_ttl: 30m
        ttl: 5m
      - id: blocked-branch
        deny: "'branch' in context && context.branch == 'hotfix'"
"""


class Clock:
    """A clock the test moves; the app reads it for every decision and approval."""

    def __init__(self) -> None:
        # On a whole minute after the signing key the runtime just made (it signs from then).
        self.now = (datetime.now(UTC) + timedelta(minutes=1)).replace(second=0, microsecond=0)
        self.start = self.now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(runtime: Runtime, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(runtime, clock=clock)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://execauth.test") as c:
            yield c


@dataclass
class Org:
    tenant: Tenant
    approvers: list[dict[str, str]]  # admin keys: {"Authorization": ...}, key ids in .ids
    ids: list[str]
    auditor: dict[str, str]

    @property
    def requester(self) -> dict[str, str]:
        return self.tenant.auth


async def make_org(client: httpx.AsyncClient, *, quorum: int = 1, profile: str = "a") -> Org:
    policy = ESCALATE_POLICY.replace("QUORUM", str(quorum))
    tenant = await make_tenant(client, policy=policy, wire_profile=profile)
    approvers, ids = [], []
    for name in ("alice", "bob"):
        key = await client.post(
            f"/console/v1/orgs/{tenant.org_id}/keys",
            json={"name": name, "role": "admin"},
            headers=ADMIN,
        )
        assert key.status_code == 201, key.text
        approvers.append({"Authorization": f"Bearer {key.json()['api_key']}"})
        ids.append(key.json()["key_id"])
    auditor = await client.post(
        f"/console/v1/orgs/{tenant.org_id}/keys",
        json={"name": "audit", "role": "auditor"},
        headers=ADMIN,
    )
    assert auditor.status_code == 201, auditor.text
    return Org(tenant, approvers, ids, {"Authorization": f"Bearer {auditor.json()['api_key']}"})


@pytest.fixture
async def org(client: httpx.AsyncClient) -> Org:
    return await make_org(client)


async def escalate(
    client: httpx.AsyncClient, org: Org, *, key: str | None = None, **context: Any
) -> dict[str, Any]:
    headers = dict(org.requester)
    if key is not None:
        headers["Idempotency-Key"] = key
    answer = await client.post(
        "/v1/execute",
        json={
            "surface": "deploy.production",
            "actor": "release-bot",
            "context": {"env": "prod", **context},
        },
        headers=headers,
    )
    assert answer.status_code in (200, 202), answer.text
    receipt: dict[str, Any] = answer.json()
    return receipt


async def vote(
    client: httpx.AsyncClient,
    approval_id: str,
    headers: dict[str, str],
    verb: str = "approve",
    **body: Any,
) -> httpx.Response:
    return await client.post(
        f"/operator/approvals/{approval_id}/{verb}",
        json={"reason": "looks right", **body},
        headers=headers,
    )
