"""Operator surface access (docs/api.md): admins manage keys, auditors read, executors don't."""

from __future__ import annotations

import httpx
import pytest

from tests.operator.conftest import Operators

pytestmark = pytest.mark.anyio
PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
READ_ENDPOINTS = ["/operator/keys", "/operator/executions", "/operator/audit", "/operator/usage"]


@pytest.mark.parametrize("path", READ_ENDPOINTS)
async def test_an_execute_key_is_403_on_the_operator_surface(
    client: httpx.AsyncClient, ops: Operators, path: str
) -> None:
    response = await client.get(path, headers=ops.tenant.auth)
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


@pytest.mark.parametrize("path", READ_ENDPOINTS)
async def test_an_auditor_key_may_read(
    client: httpx.AsyncClient, ops: Operators, path: str
) -> None:
    assert (await client.get(path, headers=ops.auditor)).status_code == 200


@pytest.mark.parametrize("path", READ_ENDPOINTS)
async def test_no_key_is_401(client: httpx.AsyncClient, path: str) -> None:
    assert (await client.get(path)).status_code == 401


async def test_an_auditor_key_may_not_issue_keys(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await client.post("/operator/keys", json={"name": "x"}, headers=ops.auditor)
    assert response.status_code == 403


async def test_an_admin_key_or_keys_cannot_request_executions(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await client.post("/v1/execute", json=PERMIT, headers=ops.admin)
    assert response.status_code == 403


async def test_an_admin_key_issues_a_working_execute_key_shown_once(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    issued = await client.post(
        "/operator/keys",
        json={"name": "deployer", "role": "execute", "surfaces": ["deploy.*"]},
        headers=ops.admin,
    )
    assert issued.status_code == 201
    secret = issued.json()["api_key"]
    decision = await client.post(
        "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
    )
    assert decision.json()["decision"] == "PERMIT"
    listing = await client.get("/operator/keys", headers=ops.admin)
    assert secret not in listing.text


async def test_an_admin_key_rotates_a_key_with_grace(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    rotated = await client.post(
        f"/operator/keys/{ops.tenant.key_id}/rotate", json={"grace_seconds": 60}, headers=ops.admin
    )
    assert rotated.status_code == 200
    for secret in (ops.tenant.api_key, rotated.json()["api_key"]):
        response = await client.post(
            "/v1/execute", json=PERMIT, headers={"Authorization": f"Bearer {secret}"}
        )
        assert response.status_code == 200


async def test_rotation_without_a_body_uses_the_default_grace(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    rotated = await client.post(f"/operator/keys/{ops.tenant.key_id}/rotate", headers=ops.admin)
    assert rotated.status_code == 200
    assert rotated.json()["previous_valid_until"] is not None


async def test_an_admin_key_revokes_a_key_and_it_answers_401(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    revoked = await client.delete(f"/operator/keys/{ops.tenant.key_id}", headers=ops.admin)
    assert revoked.status_code == 204
    response = await client.post("/v1/execute", json=PERMIT, headers=ops.tenant.auth)
    assert response.status_code == 401
