"""An escalate rule's bound grant (docs/policy-language.md, "Constraints"): computed on
the request, signed into the ESCALATE for its approvers to see, and carried by the PERMIT
the approval issues, which verifies offline with it."""

from __future__ import annotations

import httpx
import pytest

from execauth.keyring import key_list_document
from execauth.serving.runtime import Runtime
from execauth.verify import parse_key_list, verify_receipt
from tests.approvals.conftest import Clock, vote
from tests.conftest import ADMIN, make_tenant

pytestmark = pytest.mark.anyio

POLICY = """
surfaces:
  - match: payments.transfer
    rules:
      - id: large-transfers
        escalate: payload.amount > 1000
        constraints:
          max_amount: {cel: payload.amount}
          currency: {cel: payload.currency}
        single_use: true
        ttl: 5m
"""


async def test_the_approved_permit_carries_the_escalate_rules_grant(
    client: httpx.AsyncClient, runtime: Runtime, clock: Clock
) -> None:
    tenant = await make_tenant(client, policy=POLICY)
    admin = await client.post(
        f"/console/v1/orgs/{tenant.org_id}/keys",
        json={"name": "alice", "role": "admin"},
        headers=ADMIN,
    )
    assert admin.status_code == 201, admin.text
    answer = await client.post(
        "/v1/execute",
        json={"surface": "payments.transfer", "payload": {"amount": 2500, "currency": "EUR"}},
        headers=tenant.auth,
    )
    escalation = answer.json()
    assert escalation["decision"] == "ESCALATE"
    assert escalation["constraints"] == {"max_amount": 2500, "currency": "EUR"}
    assert escalation["single_use"] is True

    approver = {"Authorization": f"Bearer {admin.json()['api_key']}"}
    done = await vote(client, escalation["approval_id"], approver)
    assert done.json()["state"] == "approved", done.text
    permit = done.json()["outcome_receipt"]
    assert permit["decision"] == "PERMIT"
    assert permit["constraints"] == {"max_amount": 2500, "currency": "EUR"}
    assert permit["single_use"] is True

    keys, issuer = parse_key_list(
        key_list_document(runtime.keyring.records, runtime.settings.issuer)
    )
    verdict = verify_receipt(permit, keys, now=clock(), issuer=issuer)
    assert verdict.authentic
    assert verdict.constraints == {"max_amount": 2500, "currency": "EUR"}
