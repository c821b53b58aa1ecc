"""The console's approvals inbox: what is asked, approve and reject with the API's rules."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.approvals.conftest import Org, escalate, make_org
from tests.web.conftest import Clock, csrf_of, secret_of, sign_in

pytestmark = pytest.mark.anyio


async def signed_in(client: httpx.AsyncClient, headers: dict[str, str]) -> None:
    answer = await sign_in(client, secret_of(headers))
    assert answer.status_code == 303, answer.text


async def inbox(client: httpx.AsyncClient) -> str:
    page = await client.get("/console/approvals")
    assert page.status_code == 200, page.text
    return page.text


def card(html: str, approval_id: str) -> str:
    """The inbox's section for one pending approval."""
    parts = html.split(f'<section class="card approval" data-approval-id="{approval_id}"')
    assert len(parts) == 2, f"{approval_id} is not pending on the page"
    return parts[1].split("</section>")[0]


def recent_row(html: str, approval_id: str) -> str:
    """The inbox's "recently decided" row of one approval."""
    recent = html.split('class="recent-approvals"')[1]
    parts = recent.split(f'<tr data-approval-id="{approval_id}">')
    assert len(parts) == 2, f"{approval_id} is not among the recent approvals"
    return parts[1].split("</tr>")[0]


async def cast(
    client: httpx.AsyncClient, approval_id: str, verb: str, **fields: str
) -> httpx.Response:
    token = csrf_of(await inbox(client))
    return await client.post(
        f"/console/approvals/{approval_id}/{verb}", data={"csrf_token": token, **fields}
    )


async def state(client: httpx.AsyncClient, org: Org, approval_id: str) -> dict[str, Any]:
    shown = await client.get(f"/operator/approvals/{approval_id}", headers=org.auditor)
    assert shown.status_code == 200, shown.text
    approval: dict[str, Any] = shown.json()
    return approval


@pytest.fixture
async def org(client: httpx.AsyncClient) -> Org:
    made = await make_org(client)
    await signed_in(client, made.approvers[0])  # alice, an admin the rule names
    return made


async def test_the_inbox_shows_what_a_pending_approval_asks(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org, ticket="CHG-4711")
    section = card(await inbox(client), receipt["approval_id"])
    assert "deploy.production" in section
    assert "release-bot" in section
    assert "CHG-4711" in section  # the context
    assert "needs-approval" in section  # the rule
    assert f"{receipt['policy_id']} v{receipt['policy_version']}" in section
    assert org.tenant.key_id in section  # the requesting key
    assert "0 of 1 approval" in section
    assert ">Approve</button>" in section
    assert ">Reject</button>" in section


async def test_the_console_nav_links_to_the_inbox(client: httpx.AsyncClient, org: Org) -> None:
    page = await client.get("/console/executions")
    assert '<a href="/console/approvals">Approvals</a>' in page.text


async def test_approving_from_the_inbox_issues_the_linked_permit(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    approval_id = receipt["approval_id"]
    voted = await cast(client, approval_id, "approve", reason="CHG-4711 reviewed")
    assert voted.status_code == 303
    assert voted.headers["location"] == f"/console/approvals/{approval_id}?voted=approve"
    shown = await state(client, org, approval_id)
    assert shown["state"] == "approved"
    permit = shown["outcome_receipt"]
    assert permit["decision"] == "PERMIT"
    assert [a["key_id"] for a in permit["approvers"]] == [org.ids[0]]
    page = await client.get(voted.headers["location"])
    assert "the service issued a PERMIT" in page.text
    assert f'href="/console/executions/{permit["execution_id"]}"' in page.text


async def test_a_decided_approval_leaves_pending_for_the_recent_list(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    await cast(client, receipt["approval_id"], "approve", reason="ok")
    html = await inbox(client)
    assert 'id="no-pending"' in html
    row = recent_row(html, receipt["approval_id"])
    assert "approved" in row
    assert "PERMIT" in row


async def test_rejecting_from_the_inbox_issues_a_deny(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await escalate(client, org)
    voted = await cast(client, receipt["approval_id"], "reject", reason="not on a Friday")
    assert voted.status_code == 303
    shown = await state(client, org, receipt["approval_id"])
    assert shown["state"] == "rejected"
    assert shown["outcome_receipt"]["decision"] == "DENY"
    assert shown["votes"][0]["reason"] == "not on a Friday"


async def test_a_rejection_without_a_reason_is_refused_on_the_page(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    refused = await cast(client, receipt["approval_id"], "reject", reason="  ")
    assert refused.status_code == 400
    assert "a rejection needs a reason" in refused.text
    assert (await state(client, org, receipt["approval_id"]))["state"] == "pending"


async def test_a_rejected_approval_cannot_then_be_approved(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    await cast(client, receipt["approval_id"], "reject", reason="no")
    client.cookies.clear()
    await signed_in(client, org.approvers[1])  # bob
    refused = await cast(client, receipt["approval_id"], "approve", reason="yes")
    assert refused.status_code == 409
    assert f"approval {receipt['approval_id']} is rejected" in refused.text
    assert (await state(client, org, receipt["approval_id"]))["state"] == "rejected"


async def test_approving_for_the_requesting_actor_is_refused_with_a_message(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    refused = await cast(client, receipt["approval_id"], "approve", actor="release-bot")
    assert refused.status_code == 403
    message = re.search(r'<p class="notice error"[^>]*>([^<]*)</p>', refused.text)
    assert message, refused.text
    assert "requested the execution and cannot approve it" in message.group(1)
    assert 'value="release-bot"' in refused.text  # what was typed is kept
    assert (await state(client, org, receipt["approval_id"]))["votes"] == []


async def test_an_approver_counts_once_and_is_told_so(client: httpx.AsyncClient) -> None:
    org = await make_org(client, quorum=2)
    await signed_in(client, org.approvers[0])
    receipt = await escalate(client, org)
    await cast(client, receipt["approval_id"], "approve", reason="first")
    section = card(await inbox(client), receipt["approval_id"])
    assert "1 of 2 approvals" in section
    assert "this key has already voted" in section
    assert ">Approve</button>" not in section
    again = await cast(client, receipt["approval_id"], "approve", reason="second")
    assert again.status_code == 409
    shown = await state(client, org, receipt["approval_id"])
    assert (shown["state"], shown["approvals"]) == ("pending", 1)


async def test_a_key_the_rule_does_not_name_sees_no_buttons_and_is_refused(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    client.cookies.clear()
    await signed_in(client, org.auditor)
    section = card(await inbox(client), receipt["approval_id"])
    assert "not among the rule&#39;s approvers" in section
    refused = await cast(client, receipt["approval_id"], "approve")
    assert refused.status_code == 403
    assert (await state(client, org, receipt["approval_id"]))["votes"] == []


async def test_a_vote_without_the_csrf_token_is_refused(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await escalate(client, org)
    refused = await client.post(
        f"/console/approvals/{receipt['approval_id']}/approve", data={"reason": "ok"}
    )
    assert refused.status_code == 403
    assert (await state(client, org, receipt["approval_id"]))["state"] == "pending"


async def test_another_organizations_approval_is_not_found(
    client: httpx.AsyncClient, org: Org
) -> None:
    other = await make_org(client)
    receipt = await escalate(client, other)
    approval_id = receipt["approval_id"]
    assert (await client.get(f"/console/approvals/{approval_id}")).status_code == 404
    assert approval_id not in await inbox(client)
    refused = await cast(client, approval_id, "approve", reason="not mine")
    assert refused.status_code == 404
    assert (await state(client, other, approval_id))["votes"] == []


async def test_a_malformed_approval_id_is_not_found(client: httpx.AsyncClient, org: Org) -> None:
    for approval_id in ("nope", "service_appr_%00" + "A" * 25, "service_exec_" + "A" * 26):
        assert (await client.get(f"/console/approvals/{approval_id}")).status_code == 404


async def test_an_expired_approval_is_listed_as_expired_and_refuses_votes(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await escalate(client, org)
    clock.now += timedelta(minutes=31)  # the rule's approval_ttl is 30m
    html = await inbox(client)
    assert "expired" in recent_row(html, receipt["approval_id"])
    assert 'id="no-pending"' in html
    refused = await cast(client, receipt["approval_id"], "approve", reason="too late")
    assert refused.status_code == 409
    assert "is expired" in refused.text
