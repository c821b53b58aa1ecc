"""Tenant isolation (docs/api.md): another org's keys see nothing of this one: 404, never data."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import sequence
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
    # The other org gets a log of its own, so that its log routes have something to show.
    await client.post("/v1/execute", json=PERMIT, headers=other.tenant.auth)
    sequence(client)  # the victim's receipt now has a proof that must stay invisible
    return TwoOrgs(victim, other, receipt["execution_id"], receipt)


def _caller(orgs: TwoOrgs, role: str) -> dict[str, str]:
    return {"admin": orgs.other.admin, "auditor": orgs.other.auditor}.get(
        role, orgs.other.tenant.auth
    )


ROLES = ["admin", "auditor", "execute"]
ID_ROUTES = [
    ("GET", "/operator/executions/{execution}"),
    ("POST", "/operator/executions/{execution}/replay"),
    ("POST", "/operator/keys/{key}/rotate"),
    ("DELETE", "/operator/keys/{key}"),
    ("GET", "/v1/receipts/{receipt}/proof"),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("method", "path"), ID_ROUTES)
async def test_another_orgs_ids_are_404_or_refused_for_every_role(
    client: httpx.AsyncClient, orgs: TwoOrgs, method: str, path: str, role: str
) -> None:
    url = path.format(
        execution=orgs.victim_execution,
        key=orgs.victim.tenant.key_id,
        receipt=orgs.victim_receipt["receipt_id"],
    )
    response = await client.request(method, url, headers=_caller(orgs, role))
    # 404 when the role may use the route; 403 when it may not use it at all: never the data.
    assert response.status_code in (403, 404), response.text
    for secret_of_victim in (orgs.victim.tenant.org_id, orgs.victim_receipt["signature"]):
        assert str(secret_of_victim) not in response.text


@pytest.mark.parametrize("role", ["admin", "auditor"])
@pytest.mark.parametrize(
    "path",
    [
        "/operator/keys",
        "/operator/executions",
        "/operator/audit",
        "/operator/usage",
        "/operator/log/checkpoint",
        "/operator/log/consistency?from=1&to=1",
    ],
)
async def test_listings_never_contain_another_orgs_data(
    client: httpx.AsyncClient, orgs: TwoOrgs, path: str, role: str
) -> None:
    response = await client.get(path, headers=_caller(orgs, role))
    assert response.status_code == 200, response.text
    for secret_of_victim in (
        orgs.victim.tenant.org_id,
        orgs.victim.tenant.key_id,
        orgs.victim_execution,
    ):
        assert secret_of_victim not in response.text


async def test_a_range_replay_sees_only_the_callers_executions(
    client: httpx.AsyncClient, orgs: TwoOrgs
) -> None:
    response = await client.post("/operator/replay", json={}, headers=orgs.other.admin)
    assert response.status_code == 200, response.text
    assert orgs.victim_execution not in response.text
    assert response.json()["replayed"] == 1


async def test_the_checkpoint_is_of_the_callers_own_log(
    client: httpx.AsyncClient, orgs: TwoOrgs
) -> None:
    response = await client.get("/operator/log/checkpoint", headers=orgs.other.auditor)
    assert f"/log/{orgs.other.tenant.org_id}\n" in response.json()["checkpoint"]
    assert response.json()["tree_size"] == 1


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
