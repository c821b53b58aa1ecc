"""Human approval end to end through the API, on SQLite and PostgreSQL (docs/approvals.md)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from execauth.keyring import key_list_document
from execauth.serving.runtime import Runtime
from execauth.store.tables import executions, log_leaves, usage_counters
from execauth.verify import parse_key_list, verify_receipt
from execauth.wire_time import format_timestamp
from tests.approvals.conftest import Clock, Org, escalate, make_org, vote
from tests.conftest import sequence

pytestmark = pytest.mark.anyio


def _verify(runtime: Runtime, receipt: dict[str, Any], clock: Clock) -> Any:
    keys, issuer = parse_key_list(
        key_list_document(runtime.keyring.records, runtime.settings.issuer)
    )
    return verify_receipt(receipt, keys, now=clock(), issuer=issuer)


async def test_escalate_is_a_signed_blocked_receipt_naming_its_approval(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    receipt = await escalate(client, org)
    assert receipt["decision"] == "ESCALATE"
    assert receipt["enforcement"] == "BLOCKED"
    assert receipt["reason_code"] == "APPROVAL_REQUIRED"
    assert receipt["approval_id"].startswith("service_appr_")
    assert receipt["approval_expires_at"] == format_timestamp(clock.start + timedelta(minutes=30))
    assert receipt["approval_url"].endswith("/v1/approvals/" + receipt["approval_id"])
    assert "expires_at" not in receipt
    verdict = _verify(runtime, receipt, clock)
    assert verdict.authentic
    assert verdict.approval_id == receipt["approval_id"]


async def test_profile_b_answers_escalate_with_202(client: httpx.AsyncClient) -> None:
    org = await make_org(client, profile="b")
    answer = await client.post(
        "/v1/execute",
        json={"surface": "deploy.production", "context": {"env": "prod"}},
        headers=org.requester,
    )
    assert answer.status_code == 202
    assert answer.json()["decision"] == "ESCALATE"


async def test_a_matching_deny_is_not_escalated(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await escalate(client, org, branch="hotfix")
    assert receipt["decision"] == "DENY"


async def test_the_requesting_key_cannot_approve_its_own_request(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    answer = await vote(client, receipt["approval_id"], org.requester)
    assert answer.status_code == 403
    assert "requested the execution" in answer.json()["message"]


async def test_the_requesting_actor_cannot_approve_through_another_key(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    answer = await vote(client, receipt["approval_id"], org.approvers[0], actor="release-bot")
    assert answer.status_code == 403


async def test_a_key_the_rule_does_not_name_cannot_approve(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    answer = await vote(client, receipt["approval_id"], org.auditor)
    assert answer.status_code == 403
    assert "not among the rule's approvers" in answer.json()["message"]


async def test_quorum_of_two_with_the_same_approver_twice_stays_pending(
    client: httpx.AsyncClient,
) -> None:
    org = await make_org(client, quorum=2)
    approval_id = (await escalate(client, org))["approval_id"]
    first = await vote(client, approval_id, org.approvers[0])
    again = await vote(client, approval_id, org.approvers[0])
    assert first.status_code == 200
    assert first.json()["state"] == "pending"
    assert again.status_code == 409
    shown = await client.get(f"/operator/approvals/{approval_id}", headers=org.auditor)
    assert shown.json()["state"] == "pending"
    assert shown.json()["approvals"] == 1


async def test_quorum_issues_a_linked_permit_that_verifies_offline_with_its_approvers(
    client: httpx.AsyncClient, runtime: Runtime, clock: Clock
) -> None:
    org = await make_org(client, quorum=2)
    escalation = await escalate(client, org)
    await vote(client, escalation["approval_id"], org.approvers[0])
    clock.advance(minutes=1)
    done = await vote(client, escalation["approval_id"], org.approvers[1], actor="bob@acme")
    assert done.json()["state"] == "approved"
    permit = done.json()["outcome_receipt"]
    assert permit["decision"] == "PERMIT"
    assert permit["escalation_receipt_id"] == escalation["receipt_id"]
    assert permit["request_digest"] == escalation["request_digest"]
    assert permit["expires_at"] == format_timestamp(clock.start + timedelta(minutes=6))  # ttl 5m
    verdict = _verify(runtime, permit, clock)
    assert verdict.authentic
    assert verdict.approvers == tuple(org.ids)


async def test_a_rejection_is_final_and_a_later_approval_is_refused(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    rejected = await vote(client, approval_id, org.approvers[0], "reject", reason="not today")
    approve = await vote(client, approval_id, org.approvers[1])
    assert rejected.json()["state"] == "rejected"
    assert approve.status_code == 409
    final = rejected.json()["outcome_receipt"]
    assert final["decision"] == "DENY"
    assert final["reasonCode"] == "SERVICE_POLICY_APPROVAL_REJECTED"
    assert _verify(runtime, final, clock).authentic


async def test_a_rejection_needs_a_reason(client: httpx.AsyncClient, org: Org) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    answer = await vote(client, approval_id, org.approvers[0], "reject", reason="")
    assert answer.status_code == 400


async def test_an_expired_approval_cannot_be_approved_and_ends_in_a_deny(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    clock.advance(minutes=30)
    late = await vote(client, approval_id, org.approvers[0])
    assert late.status_code == 409
    shown = (await client.get(f"/operator/approvals/{approval_id}", headers=org.auditor)).json()
    assert shown["state"] == "expired"
    assert shown["outcome_receipt"]["decision"] == "DENY"
    assert shown["outcome_receipt"]["reasonCode"] == "SERVICE_POLICY_APPROVAL_EXPIRED"


async def test_an_approval_just_before_expiry_counts(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    clock.advance(minutes=29, seconds=59)
    assert (await vote(client, approval_id, org.approvers[0])).json()["state"] == "approved"


async def test_a_repeat_returns_the_escalate_while_pending_and_the_permit_once_approved(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalation = await escalate(client, org, key="deploy-42")
    pending = await escalate(client, org, key="deploy-42")
    assert pending == escalation
    await vote(client, escalation["approval_id"], org.approvers[0])
    approved = await escalate(client, org, key="deploy-42")
    assert approved["decision"] == "PERMIT"
    assert approved["approval_id"] == escalation["approval_id"]


async def test_the_request_counts_once_against_the_quota(
    client: httpx.AsyncClient, org: Org, runtime: Runtime
) -> None:
    escalation = await escalate(client, org, key="deploy-43")
    await vote(client, escalation["approval_id"], org.approvers[0])
    await escalate(client, org, key="deploy-43")
    with runtime.engine.connect() as conn:
        counted = conn.execute(
            select(usage_counters.c.executes).where(usage_counters.c.org_id == org.tenant.org_id)
        ).scalar_one()
    assert counted == 1


async def test_outcome_receipts_are_sequenced_into_the_org_log(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    escalation = await escalate(client, org)
    clock.advance(seconds=1)
    approved = await vote(client, escalation["approval_id"], org.approvers[0])
    permit_execution = approved.json()["outcome_receipt"]["execution_id"]
    assert sequence(client) == 2
    with runtime.engine.connect() as conn:
        indexes = dict(
            conn.execute(
                select(log_leaves.c.execution_id, log_leaves.c.log_index).where(
                    log_leaves.c.org_id == org.tenant.org_id
                )
            ).all()
        )
    assert indexes == {escalation["execution_id"]: 0, permit_execution: 1}


async def test_every_step_is_in_the_lineage_and_the_audit_trail(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalation = await escalate(client, org)
    await vote(client, escalation["approval_id"], org.approvers[0])
    shown = await client.get(
        f"/operator/executions/{escalation['execution_id']}", headers=org.auditor
    )
    kinds = [event["kind"] for event in shown.json()["lineage"]]
    assert kinds[-2:] == ["approval_voted", "approval_approved"]
    audit = await client.get("/operator/audit", headers=org.auditor)
    actions = [event["action"] for event in audit.json()["events"]]
    assert {"approval.voted", "approval.approved"} <= set(actions)


async def test_concurrent_approvals_with_quorum_one_issue_exactly_one_permit(
    client: httpx.AsyncClient, org: Org, runtime: Runtime
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    answers = await asyncio.gather(*(vote(client, approval_id, h) for h in org.approvers))
    assert sorted(a.status_code for a in answers) == [200, 409]
    with runtime.engine.connect() as conn:
        permits = conn.execute(
            select(func.count()).where(
                executions.c.org_id == org.tenant.org_id, executions.c.decision == "PERMIT"
            )
        ).scalar_one()
    assert permits == 1


async def test_the_pending_list_shows_what_is_asked(client: httpx.AsyncClient, org: Org) -> None:
    escalation = await escalate(client, org, ticket="CHG-7")
    listed = await client.get("/operator/approvals", headers=org.auditor)
    (item,) = listed.json()["items"]
    assert item["approval_id"] == escalation["approval_id"]
    assert item["surface"] == "deploy.production"
    assert item["actor"] == "release-bot"
    assert item["context"] == {"env": "prod", "ticket": "CHG-7"}
    assert item["rule_id"] == "needs-approval"
    await vote(client, escalation["approval_id"], org.approvers[0])
    assert (await client.get("/operator/approvals", headers=org.auditor)).json()["items"] == []


async def test_an_execute_key_cannot_list_approvals(client: httpx.AsyncClient, org: Org) -> None:
    answer = await client.get("/operator/approvals", headers=org.requester)
    assert answer.status_code == 403


async def test_the_requester_follows_its_approval(client: httpx.AsyncClient, org: Org) -> None:
    escalation = await escalate(client, org)
    shown = await client.get(f"/v1/approvals/{escalation['approval_id']}", headers=org.requester)
    assert shown.status_code == 200
    assert shown.json()["state"] == "pending"


async def test_another_key_does_not_see_the_requesters_approval(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalation = await escalate(client, org)
    answer = await client.get(
        f"/v1/approvals/{escalation['approval_id']}", headers=org.approvers[0]
    )
    assert answer.status_code == 404


async def test_the_long_poll_answers_as_soon_as_the_approval_is_decided(
    client: httpx.AsyncClient, org: Org
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]

    async def approve_soon() -> None:
        await asyncio.sleep(0.3)
        await vote(client, approval_id, org.approvers[0])

    waited, _ = await asyncio.gather(
        client.get(f"/v1/approvals/{approval_id}?wait=20s", headers=org.requester),
        approve_soon(),
    )
    assert waited.json()["state"] == "approved"
    assert waited.json()["outcome_receipt"]["decision"] == "PERMIT"


@pytest.mark.parametrize("wait", ["61s", "2m", "soon", "-1"])
async def test_a_wait_beyond_the_bound_or_malformed_is_400(
    client: httpx.AsyncClient, org: Org, wait: str
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    answer = await client.get(f"/v1/approvals/{approval_id}?wait={wait}", headers=org.requester)
    assert answer.status_code == 400


async def test_an_unknown_approval_is_404(client: httpx.AsyncClient, org: Org) -> None:
    answer = await client.get("/operator/approvals/service_appr_nope", headers=org.auditor)
    assert answer.status_code == 404


async def test_the_usage_report_counts_an_approved_request_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalation = await escalate(client, org)
    await vote(client, escalation["approval_id"], org.approvers[0])
    usage = (await client.get("/operator/usage", headers=org.auditor)).json()
    assert usage["executes"]["by_decision"]["ESCALATE"] == 1
    assert usage["executes"]["by_decision"]["PERMIT"] == 0


async def test_a_range_replay_re_evaluates_the_escalate_not_its_outcome(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalation = await escalate(client, org)
    await vote(client, escalation["approval_id"], org.approvers[0])
    report = (await client.post("/operator/replay", json={}, headers=org.auditor)).json()
    assert report == {"replayed": 1, "matched": 1, "mismatches": []}
