"""Tenant isolation (spec §1): another org's keys see nothing of this one: 404, never data."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from tests.operator.conftest import Operators, make_operators

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@dataclass
class TwoOrgs:
    victim: Operators
    other: Operators
    victim_execution: str
    victim_receipt: dict[str, object]


@pytest.fixture
async def orgs(client: httpx.AsyncClient) -> TwoOrgs:
    victim, other = await make_operators(client), await make_operators(client)
    headers = {**victim.tenant.auth, "Idempotency-Key": "shared-key"}
    receipt = (await client.post("/v1/execute", json=PERMIT, headers=headers)).json()
    return TwoOrgs(victim, other, receipt["execution_id"], receipt)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/operator/executions/{execution}"),
        ("POST", "/operator/keys/{key}/rotate"),
        ("DELETE", "/operator/keys/{key}"),
    ],
)
async def test_another_orgs_ids_are_404(
    client: httpx.AsyncClient, orgs: TwoOrgs, method: str, path: str
) -> None:
    url = path.format(execution=orgs.victim_execution, key=orgs.victim.tenant.key_id)
    response = await client.request(method, url, headers=orgs.other.admin)
    assert response.status_code == 404
    assert orgs.victim.tenant.org_id not in response.text


@pytest.mark.parametrize(
    "path", ["/operator/keys", "/operator/executions", "/operator/audit", "/operator/usage"]
)
async def test_listings_never_contain_another_orgs_data(
    client: httpx.AsyncClient, orgs: TwoOrgs, path: str
) -> None:
    response = await client.get(path, headers=orgs.other.admin)
    assert response.status_code == 200
    for secret_of_victim in (
        orgs.victim.tenant.org_id,
        orgs.victim.tenant.key_id,
        orgs.victim_execution,
    ):
        assert secret_of_victim not in response.text


async def test_the_victims_key_still_works_after_the_attempts(
    client: httpx.AsyncClient, orgs: TwoOrgs
) -> None:
    await client.delete(f"/operator/keys/{orgs.victim.tenant.key_id}", headers=orgs.other.admin)
    response = await client.post("/v1/execute", json=PERMIT, headers=orgs.victim.tenant.auth)
    assert response.status_code == 200


async def test_the_same_idempotency_key_in_another_org_is_a_new_decision(
    client: httpx.AsyncClient, orgs: TwoOrgs
) -> None:
    headers = {**orgs.other.tenant.auth, "Idempotency-Key": "shared-key"}
    response = await client.post("/v1/execute", json=PERMIT, headers=headers)
    assert response.status_code == 200
    assert "idempotent-replayed" not in response.headers
    assert response.json()["execution_id"] != orgs.victim_execution
    assert response.json()["org_id"] == orgs.other.tenant.org_id
