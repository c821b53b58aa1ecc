"""POST /v1/receipts/{receipt_id}/consume: a PERMIT is used once, and nothing else is."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.approvals.conftest import Clock
from tests.consumption.conftest import Org, add_key, consume, decide, make_org, permit

pytestmark = pytest.mark.anyio


async def test_a_permit_is_consumed_and_the_answer_says_when_and_by_whom(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await permit(client, org)
    clock.advance(seconds=3)

    answer = await consume(
        client, receipt["receipt_id"], org.executor, actor="agent-7", note="transfer #1"
    )

    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "receipt_id": receipt["receipt_id"],
        "execution_id": receipt["execution_id"],
        "consumed_at": clock().strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "consumed_by": {"key_id": org.tenant.key_id, "actor": "agent-7"},
        "note": "transfer #1",
    }


async def test_consume_needs_no_body(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await permit(client, org)

    answer = await client.post(
        f"/v1/receipts/{receipt['receipt_id']}/consume", headers=org.executor
    )

    assert answer.status_code == 200, answer.text
    assert answer.json()["consumed_by"] == {"key_id": org.tenant.key_id}


async def test_the_second_consumer_gets_409_saying_when_and_by_whom(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await permit(client, org)
    first = await consume(client, receipt["receipt_id"], org.executor, actor="agent-7")
    assert first.status_code == 200, first.text
    clock.advance(seconds=10)

    second = await consume(client, receipt["receipt_id"], org.admin, actor="someone-else")

    assert second.status_code == 409, second.text
    body = second.json()
    assert body["error"] == "receipt_already_consumed"
    assert body["details"] == [first.json()]
    assert org.tenant.key_id in body["message"]
    assert "agent-7" in body["message"]


async def test_concurrent_consumers_of_one_permit_exactly_one_wins(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)

    answers = await asyncio.gather(
        *(consume(client, receipt["receipt_id"], org.executor, actor=f"w{i}") for i in range(12))
    )

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [200] + [409] * 11
    winner = next(a.json() for a in answers if a.status_code == 200)
    assert all(a.json()["details"] == [winner] for a in answers if a.status_code == 409)


async def test_an_expired_permit_is_refused(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await permit(client, org)  # ttl 5m
    clock.advance(minutes=5)

    answer = await consume(client, receipt["receipt_id"], org.executor)

    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "receipt_expired"


async def test_a_permit_just_before_its_expiry_is_consumed(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    receipt = await permit(client, org)
    clock.advance(minutes=4, seconds=59)

    answer = await consume(client, receipt["receipt_id"], org.executor)

    assert answer.status_code == 200, answer.text


async def test_a_deny_receipt_is_refused(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await decide(client, org, 500)
    assert receipt["decision"] == "DENY"

    answer = await consume(client, receipt["receipt_id"], org.executor)

    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "receipt_not_permit"
    assert "DENY" in answer.json()["message"]


async def test_an_escalate_receipt_is_refused(client: httpx.AsyncClient, org: Org) -> None:
    escalated = await client.post(
        "/v1/execute", json={"surface": "deploy.production"}, headers=org.executor
    )
    assert escalated.json()["decision"] == "ESCALATE", escalated.text

    answer = await consume(client, escalated.json()["receipt_id"], org.executor)

    assert answer.status_code == 409, answer.text
    assert answer.json()["error"] == "receipt_not_permit"


async def test_the_approved_permit_of_an_escalation_is_consumed_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    escalated = await client.post(
        "/v1/execute", json={"surface": "deploy.production"}, headers=org.executor
    )
    approval_id = escalated.json()["approval_id"]
    voted = await client.post(
        f"/operator/approvals/{approval_id}/approve", json={"reason": "ok"}, headers=org.admin
    )
    outcome = voted.json()["outcome_receipt"]
    assert outcome["decision"] == "PERMIT", voted.text

    first = await consume(client, outcome["receipt_id"], org.executor)
    second = await consume(client, outcome["receipt_id"], org.executor)

    assert (first.status_code, second.status_code) == (200, 409)


async def test_another_organizations_permit_is_not_found(
    client: httpx.AsyncClient, org: Org
) -> None:
    other = await make_org(client)
    receipt = await permit(client, other)

    answer = await consume(client, receipt["receipt_id"], org.executor)
    unknown = await consume(client, "service_rcpt_01jzzzzzzzzzzzzzzzzzzzzzzz", org.executor)

    assert answer.status_code == 404, answer.text
    # The same answer as for a receipt that exists nowhere: no existence leak.
    assert (answer.json()["error"], answer.json()["message"]) == (
        unknown.json()["error"],
        unknown.json()["message"],
    )
    assert (await consume(client, receipt["receipt_id"], other.executor)).status_code == 200


async def test_an_auditor_key_cannot_consume(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await permit(client, org)

    answer = await consume(client, receipt["receipt_id"], org.auditor)

    assert answer.status_code == 403, answer.text
    assert (await consume(client, receipt["receipt_id"], org.executor)).status_code == 200


async def test_an_admin_key_of_the_organization_may_consume(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)

    answer = await consume(client, receipt["receipt_id"], org.admin)

    assert answer.status_code == 200, answer.text
    assert answer.json()["consumed_by"] == {"key_id": org.admin_key_id}


async def test_a_key_limited_to_other_surfaces_does_not_find_the_receipt(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)
    limited, _ = await add_key(client, org.tenant.org_id, name="deployer", surfaces=["deploy.*"])

    answer = await consume(client, receipt["receipt_id"], limited)

    assert answer.status_code == 404, answer.text


async def test_without_a_key_consume_is_401(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await permit(client, org)

    answer = await consume(client, receipt["receipt_id"], {})

    assert answer.status_code == 401, answer.text


@pytest.mark.parametrize(
    "body",
    [{"who": "x"}, {"actor": ""}, {"actor": 7}, {"note": "n" * 1001}],
    ids=["unknown-field", "empty-actor", "numeric-actor", "long-note"],
)
async def test_a_bad_body_is_400_and_consumes_nothing(
    client: httpx.AsyncClient, org: Org, body: dict[str, object]
) -> None:
    receipt = await permit(client, org)

    answer = await consume(client, receipt["receipt_id"], org.executor, **body)

    assert answer.status_code == 400, answer.text
    assert (await consume(client, receipt["receipt_id"], org.executor)).status_code == 200


async def test_a_body_that_is_not_an_object_is_400(client: httpx.AsyncClient, org: Org) -> None:
    receipt = await permit(client, org)

    answer = await client.post(
        f"/v1/receipts/{receipt['receipt_id']}/consume", json=["x"], headers=org.executor
    )

    assert answer.status_code == 400, answer.text


async def test_consume_is_counted_against_the_rate_limit(
    client: httpx.AsyncClient, org: Org
) -> None:
    receipt = await permit(client, org)

    first = await consume(client, receipt["receipt_id"], org.executor)
    second = await consume(client, receipt["receipt_id"], org.executor)

    remaining = [int(a.headers["RateLimit-Remaining"]) for a in (first, second)]
    assert remaining[1] == remaining[0] - 1


async def test_profile_b_nests_the_409_error(client: httpx.AsyncClient) -> None:
    org = await make_org(client, profile="b")
    receipt = await permit(client, org)
    await consume(client, receipt["receipt_id"], org.executor)

    answer = await consume(client, receipt["receipt_id"], org.executor)

    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["code"] == "receipt_already_consumed"
    assert error["details"][0]["consumed_by"] == {"key_id": org.tenant.key_id}
