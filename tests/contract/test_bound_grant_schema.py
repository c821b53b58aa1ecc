"""A PERMIT carrying a bound grant (and an ESCALATE carrying the grant its PERMIT will
carry) is answered as openapi.yaml documents it: ``constraints`` and ``single_use`` are
receipt fields of the contract, not extra properties (docs/receipts.md, "Constraints")."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import make_tenant
from tests.contract.test_openapi import assert_documented, component, schema_errors

pytestmark = pytest.mark.anyio

POLICY = """\
surfaces:
  - match: payments.transfer
    rules:
      - id: bound
        permit: payload.amount <= 500
        constraints:
          max_amount: {cel: payload.amount}
          currency: EUR
        single_use: true
      - id: large
        escalate: payload.amount > 500
        constraints: {max_amount: {cel: payload.amount}}
"""


async def _execute(client: httpx.AsyncClient, amount: int) -> httpx.Response:
    tenant = await make_tenant(client, policy=POLICY)
    return await client.post(
        "/v1/execute",
        json={"surface": "payments.transfer", "payload": {"amount": amount}},
        headers=tenant.auth,
    )


async def test_a_bound_permit_is_answered_as_documented(client: httpx.AsyncClient) -> None:
    response = await _execute(client, 120)
    assert response.json()["constraints"] == {"max_amount": 120, "currency": "EUR"}
    assert response.json()["single_use"] is True
    assert_documented(response, "/v1/execute")


async def test_an_escalate_with_a_grant_is_answered_as_documented(
    client: httpx.AsyncClient,
) -> None:
    response = await _execute(client, 900)
    assert response.json()["decision"] == "ESCALATE"
    assert response.json()["constraints"] == {"max_amount": 900}
    assert_documented(response, "/v1/execute")


async def test_a_blocked_receipt_with_a_grant_is_not_a_documented_receipt(
    client: httpx.AsyncClient,
) -> None:
    tenant = await make_tenant(client, policy=POLICY)
    response = await client.post(
        "/v1/execute", json={"surface": "payments.transfer"}, headers=tenant.auth
    )
    silence = response.json()
    assert silence["decision"] == "SILENCE"
    assert schema_errors(component("SilenceReceipt"), silence) == []
    assert schema_errors(component("SilenceReceipt"), silence | {"single_use": True}) != []
    assert schema_errors(component("SilenceReceipt"), silence | {"constraints": {"a": 1}}) != []
