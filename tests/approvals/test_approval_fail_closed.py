"""Fail closed: an approval whose outcome cannot be signed or stored is no PERMIT, and
its vote is not counted (the whole transaction rolls back)."""

from __future__ import annotations

from datetime import datetime

import httpx
import msgspec
import pytest
from sqlalchemy import func, select

from execauth.approvals import State, Vote
from execauth.errors import ServiceUnavailable, SigningUnavailable
from execauth.receipts import RECEIPT_ID_DRAWS
from execauth.serving.runtime import Runtime
from execauth.store.approvals import Ballot
from execauth.store.executions import ExecutionRecord
from execauth.store.tables import approval_votes, executions
from execauth.usecases.execute import ExecutionService
from tests.approvals.conftest import Clock, Org, escalate
from tests.usecases.test_execute_without_http import TakenFirst, verdict

pytestmark = pytest.mark.anyio


def _cannot_sign(
    escalation: dict[str, object], state: State, votes: list[Vote], now: datetime
) -> ExecutionRecord:
    raise SigningUnavailable("no signing key is available")


async def test_a_quorum_whose_permit_cannot_be_signed_stays_pending_with_no_vote(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    approval_id = (await escalate(client, org))["approval_id"]
    store = ExecutionService(runtime, clock=clock).approvals
    ballot = Ballot(org.ids[0], "admin", "approve", None, "")
    with pytest.raises(SigningUnavailable):
        store.vote(org.tenant.org_id, approval_id, ballot, clock(), _cannot_sign)
    with runtime.engine.connect() as conn:
        permits = conn.execute(
            select(func.count()).where(
                executions.c.org_id == org.tenant.org_id, executions.c.decision == "PERMIT"
            )
        ).scalar_one()
        votes = conn.execute(select(func.count()).select_from(approval_votes)).scalar_one()
    assert (permits, votes) == (0, 0)
    shown = await client.get(f"/operator/approvals/{approval_id}", headers=org.auditor)
    assert shown.json()["state"] == "pending"


async def test_a_repeat_after_the_deadline_answers_the_expiry_deny(
    client: httpx.AsyncClient, org: Org, clock: Clock
) -> None:
    first = await escalate(client, org, key="k-1")
    clock.advance(hours=2)  # past approval_ttl: the repeat settles the expiry
    again = await escalate(client, org, key="k-1")
    assert again["decision"] == "DENY"
    assert again["approval_id"] == first["approval_id"]


async def test_an_outcome_whose_receipt_id_is_taken_is_signed_under_a_new_one(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    escalation = await escalate(client, org)
    taken = escalation["receipt_id"]
    ids = TakenFirst(taken, times=1)
    service = ExecutionService(runtime, clock=clock, receipt_ids=ids)
    ballot = Ballot(org.ids[0], "admin", "approve", None, "")

    approval = service.approvals.vote(
        org.tenant.org_id, escalation["approval_id"], ballot, clock(), service.issue_outcome
    )
    service.rate_limiter.close()

    assert approval.state == "approved"
    assert approval.outcome_receipt is not None
    outcome = msgspec.json.decode(approval.outcome_receipt)
    assert (outcome["decision"], ids.draws) == ("PERMIT", 2)
    assert outcome["receipt_id"] != taken
    assert verdict(runtime, outcome).reason == "valid"


async def test_an_outcome_whose_every_receipt_id_drawn_is_taken_leaves_the_vote_uncounted(
    client: httpx.AsyncClient, org: Org, runtime: Runtime, clock: Clock
) -> None:
    escalation = await escalate(client, org)
    ids = TakenFirst(escalation["receipt_id"], times=RECEIPT_ID_DRAWS)
    service = ExecutionService(runtime, clock=clock, receipt_ids=ids)
    ballot = Ballot(org.ids[0], "admin", "approve", None, "")

    with pytest.raises(ServiceUnavailable):  # ReceiptIdTaken: a 503, never a PERMIT
        service.approvals.vote(
            org.tenant.org_id, escalation["approval_id"], ballot, clock(), service.issue_outcome
        )
    service.rate_limiter.close()

    assert ids.draws == RECEIPT_ID_DRAWS
    with runtime.engine.connect() as conn:
        votes = conn.execute(select(func.count()).select_from(approval_votes)).scalar_one()
    assert votes == 0
    shown = await client.get(
        f"/operator/approvals/{escalation['approval_id']}", headers=org.auditor
    )
    assert shown.json()["state"] == "pending"
