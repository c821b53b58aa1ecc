"""Operator-surface fixtures: an organization with execute, admin and auditor keys."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import ADMIN, Tenant, make_tenant


@dataclass
class Operators:
    tenant: Tenant  # the execute key
    admin: dict[str, str]
    auditor: dict[str, str]
    admin_key_id: str


async def issue(client: httpx.AsyncClient, org_id: str, role: str) -> httpx.Response:
    response = await client.post(
        f"/console/v1/orgs/{org_id}/keys", json={"name": role, "role": role}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    return response


async def make_operators(client: httpx.AsyncClient) -> Operators:
    tenant = await make_tenant(client)
    admin = (await issue(client, tenant.org_id, "admin")).json()
    auditor = (await issue(client, tenant.org_id, "auditor")).json()
    return Operators(
        tenant,
        {"Authorization": f"Bearer {admin['api_key']}"},
        {"Authorization": f"Bearer {auditor['api_key']}"},
        admin["key_id"],
    )


@pytest.fixture
async def ops(client: httpx.AsyncClient) -> Operators:
    return await make_operators(client)
