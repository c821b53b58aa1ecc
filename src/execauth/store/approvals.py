"""Approvals of ESCALATE executions, stored (docs/approvals.md).

Every change happens in one transaction that holds the approval's lock: SQLite's
``BEGIN IMMEDIATE`` under the receipt writer's ``WriterLock`` (one writer at a time,
across processes), PostgreSQL's ``SELECT … FOR UPDATE`` on the approval row (two
instances serialize on it). Inside it the votes are read, the rules of
``execauth.approvals`` applied, the vote inserted and, when the approval becomes final,
its outcome receipt inserted as an execution (``insert_execution``: the path of every
receipt, so the sequencer puts it in the org's log and streaming delivers it) — all
committed together or not at all. So a quorum issues exactly one PERMIT, and nothing
acknowledged is lost.

Expiry is settled by whichever comes first after ``expires_at``: a read, a repeat or a
vote of this approval, or the background sweep (``execauth.usecases.approval_sweep``), which
settles approvals nobody looks at again. All of them go through ``settle``, under the
same lock, so exactly one expiry receipt is issued (docs/decisions.md, "Approval events
and the expiry sweep").
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, and_, exists, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from ulid import ULID

from execauth.approvals import FINAL_STATES, State, Terms, Vote, outcome, refusal
from execauth.errors import ApprovalClosed, Forbidden, NotFound, ReceiptIdTaken
from execauth.receipts import RECEIPT_ID_DRAWS, approval_id_for, execution_id_for
from execauth.store.audit import append_audit, append_lineage
from execauth.store.database import WriterLock, begin_writing
from execauth.store.execution_writes import (
    insert_execution,
    receipt_id_is_free,
    receipt_id_taken,
)
from execauth.store.executions import ExecutionRecord
from execauth.store.tables import approval_votes, approvals, executions
from execauth.tenancy.audit import AuditEvent, key_actor

# Builds (signs) the outcome receipt's record: (ESCALATE receipt, its record's evaluation
# input, final state, votes, now) → the record to insert.
OutcomeIssuer = Callable[[dict[str, Any], State, list[Vote], datetime], ExecutionRecord]


@dataclass(frozen=True, slots=True)
class Approval:
    """An approval as the API shows it: what is asked, the votes, the state, the receipts."""

    approval_id: str
    org_id: str
    execution_id: str
    state: State
    terms: Terms
    escalation: dict[str, Any]  # the ESCALATE receipt
    request: dict[str, Any]  # the evaluation input's request: surface, actor, context, …
    votes: list[Vote] = field(default_factory=list)
    outcome_receipt: bytes | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "execution_id": self.execution_id,
            "state": self.state,
            "surface": self.escalation.get("surface"),
            "actor": self.escalation.get("actor"),
            "action": self.escalation.get("action"),
            "context": self.request.get("context"),
            "policy_id": self.escalation.get("policy_id"),
            "policy_version": self.escalation.get("policy_version"),
            "rule_id": self.escalation.get("rule_id"),
            "requested_by": self.terms.requester_key_id,
            "approvers": {"roles": list(self.terms.roles), "keys": list(self.terms.keys)},
            "quorum": self.terms.quorum,
            "approvals": sum(1 for v in self.votes if v.vote == "approve"),
            "votes": [v.as_json() for v in self.votes],
            "requested_at": self.escalation.get("timestamp"),
            "expires_at": self.escalation.get("approval_expires_at"),
            "escalation_receipt": self.escalation,
            "outcome_receipt": (
                msgspec.json.decode(self.outcome_receipt) if self.outcome_receipt else None
            ),
        }


@dataclass(frozen=True, slots=True)
class Ballot:
    key_id: str
    role: str
    vote: str  # approve | reject
    actor: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class UnsettledEscalation:
    """An ESCALATE execution whose approval is not final yet, as the expiry sweep reads it."""

    decided_at_ms: int
    org_id: str
    execution_id: str
    receipt: bytes


class ApprovalStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = WriterLock.for_engine(engine)

    def settle(
        self, org_id: str, approval_id: str, now: datetime, issue: OutcomeIssuer
    ) -> Approval:
        """The approval now; an expired one gets its expiry receipt first.

        Read without a lock first: a long-poll reads several times a second, and only an
        approval whose deadline has passed unsettled needs the write lock.
        """
        with self.engine.connect() as conn:
            approval = _read(conn, org_id, approval_id, now, locked=False)
        if approval.state != "pending" or outcome(approval.terms, approval.votes, now) == "pending":
            return approval
        approval, _ = self._change(org_id, approval_id, now, issue, None)
        return approval

    def vote(
        self, org_id: str, approval_id: str, ballot: Ballot, now: datetime, issue: OutcomeIssuer
    ) -> Approval:
        """Count ``ballot``: ``Forbidden`` if this key may not vote, ``ApprovalClosed`` if the
        approval is final (an expiry found here is committed before the refusal)."""
        approval, refused = self._change(org_id, approval_id, now, issue, ballot)
        if refused is not None:
            raise refused
        return approval

    def pending(self, org_id: str, limit: int = 100) -> list[str]:
        """Ids of the org's ESCALATE executions with no final outcome, oldest first."""
        final = select(approvals.c.execution_id).where(
            approvals.c.org_id == org_id, approvals.c.state.in_(FINAL_STATES)
        )
        query = (
            select(executions.c.execution_id)
            .where(
                executions.c.org_id == org_id,
                executions.c.decision == "ESCALATE",
                executions.c.execution_id.not_in(final),
            )
            .order_by(executions.c.decided_at_ms, executions.c.execution_id)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [approval_id_for(row[0]) for row in conn.execute(query)]

    def decided(self, org_id: str, limit: int = 20) -> list[str]:
        """Ids of the org's final approvals (approved, rejected, expired), latest first.

        The console inbox's "recent" list; ``ix_approvals_org_state`` narrows it to the org.
        """
        query = (
            select(approvals.c.approval_id)
            .where(approvals.c.org_id == org_id, approvals.c.state.in_(FINAL_STATES))
            .order_by(approvals.c.decided_at.desc(), approvals.c.approval_id.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [row[0] for row in conn.execute(query)]

    def unsettled_escalations(
        self, after: tuple[int, str] | None, limit: int
    ) -> list[UnsettledEscalation]:
        """Up to ``limit`` ESCALATE executions of every org whose approval is not final,
        oldest first, after ``after`` ((decided_at_ms, execution_id) of the last one seen).

        The expiry sweep's walk (``usecases/approval_sweep.py``), along the partial index
        ``ix_executions_escalations``.
        """
        final = exists().where(
            approvals.c.execution_id == executions.c.execution_id,
            approvals.c.state.in_(FINAL_STATES),
        )
        query = (
            select(
                executions.c.decided_at_ms,
                executions.c.org_id,
                executions.c.execution_id,
                executions.c.receipt,
            )
            .where(executions.c.decision == "ESCALATE", ~final)
            .order_by(executions.c.decided_at_ms, executions.c.execution_id)
            .limit(limit)
        )
        if after is not None:
            at, execution_id = after
            query = query.where(
                or_(
                    executions.c.decided_at_ms > at,
                    and_(
                        executions.c.decided_at_ms == at, executions.c.execution_id > execution_id
                    ),
                )
            )
        with self.engine.connect() as conn:
            return [
                UnsettledEscalation(int(at), org_id, execution_id, bytes(receipt))
                for at, org_id, execution_id, receipt in conn.execute(query)
            ]

    def _change(
        self,
        org_id: str,
        approval_id: str,
        now: datetime,
        issue: OutcomeIssuer,
        ballot: Ballot | None,
    ) -> tuple[Approval, Exception | None]:
        with self._lock.held(), self.engine.connect() as conn, conn.begin():
            begin_writing(conn)
            approval = _read(conn, org_id, approval_id, now, locked=True)
            refused: Exception | None = None
            counted = False
            if approval.state == "pending":
                state = outcome(approval.terms, approval.votes, now)
                if state == "pending" and ballot is not None:
                    refused, approval = _count(conn, approval, ballot, now)
                    counted = refused is None
                    state = outcome(approval.terms, approval.votes, now)
                if state != "pending":
                    approval = _finish(conn, approval, state, now, issue)
            if ballot is not None and refused is None and not counted:
                # Final before this vote: a rejection or expiry is never undone.
                refused = ApprovalClosed(f"approval {approval_id} is {approval.state}")
            return approval, refused


def _read(
    conn: Connection, org_id: str, approval_id: str, now: datetime, *, locked: bool
) -> Approval:
    """The approval; ``locked``: created if absent and locked until the transaction ends."""
    execution_id = execution_id_for(approval_id)
    row = (
        conn.execute(
            select(executions.c.receipt, executions.c.evaluation_input).where(
                executions.c.org_id == org_id,
                executions.c.execution_id == execution_id,
                executions.c.decision == "ESCALATE",
            )
        )
        .mappings()
        .first()
    )
    if row is None:
        raise NotFound("no such approval in this organization")
    query = select(approvals.c.state, approvals.c.outcome_execution_id).where(
        approvals.c.approval_id == approval_id
    )
    if locked:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        conn.execute(
            dialect.insert(approvals)
            .values(
                approval_id=approval_id,
                org_id=org_id,
                execution_id=execution_id,
                state="pending",
                created_at=now,
            )
            .on_conflict_do_nothing()
        )
        # FOR UPDATE: a second instance's vote waits here until this transaction ends.
        query = query.with_for_update()
    found = conn.execute(query).mappings().first()
    # No row yet: nobody voted or looked since the ESCALATE was stored.
    state: State = found["state"] if found is not None else "pending"
    outcome_execution_id = found["outcome_execution_id"] if found is not None else None
    receipt = msgspec.json.decode(row["receipt"])
    stored = json.loads(row["evaluation_input"])
    outcome_receipt = None
    if outcome_execution_id is not None:
        outcome_receipt = conn.execute(
            select(executions.c.receipt).where(executions.c.execution_id == outcome_execution_id)
        ).scalar_one()
    return Approval(
        approval_id=approval_id,
        org_id=org_id,
        execution_id=execution_id,
        state=state,
        terms=Terms.from_stored(stored["approval"], receipt),
        escalation=receipt,
        request=stored.get("request", {}),
        votes=_votes(conn, approval_id),
        outcome_receipt=outcome_receipt,
    )


def _votes(conn: Connection, approval_id: str) -> list[Vote]:
    query = (
        select(approval_votes)
        .where(approval_votes.c.approval_id == approval_id)
        .order_by(approval_votes.c.voted_at, approval_votes.c.approver_key_id)
    )
    return [
        Vote(r["approver_key_id"], r["vote"], r["actor"], r["reason"], r["voted_at"])
        for r in conn.execute(query).mappings()
    ]


def _count(
    conn: Connection, approval: Approval, ballot: Ballot, now: datetime
) -> tuple[Exception | None, Approval]:
    why = refusal(
        approval.terms, approval.votes, key_id=ballot.key_id, role=ballot.role, actor=ballot.actor
    )
    if why is not None:
        already = "already voted" in why
        return (ApprovalClosed(why) if already else Forbidden(why)), approval
    vote = Vote(ballot.key_id, "approve" if ballot.vote == "approve" else "reject",
                ballot.actor, ballot.reason, now)  # fmt: skip
    conn.execute(
        approval_votes.insert().values(
            approval_id=approval.approval_id,
            approver_key_id=vote.key_id,
            org_id=approval.org_id,
            vote=vote.vote,
            actor=vote.actor,
            reason=vote.reason,
            voted_at=now,
        )
    )
    _record_step(conn, approval, now, "approval.voted", key_actor(ballot.key_id),
                 vote.as_json())  # fmt: skip
    return None, dataclasses.replace(approval, votes=[*approval.votes, vote])


def _finish(
    conn: Connection, approval: Approval, state: State, now: datetime, issue: OutcomeIssuer
) -> Approval:
    record = issue(approval.escalation, state, approval.votes, now)
    for _ in range(RECEIPT_ID_DRAWS - 1):
        # Receipt ids can meet (receipts.new_receipt_id): under the write lock, a look
        # first costs less than a failed insert, which would abort the whole change.
        if receipt_id_is_free(conn, record.receipt_id):
            break
        record = issue(approval.escalation, state, approval.votes, now)
    try:
        stored = insert_execution(conn, record, None)  # no quota: the request counted once
    except IntegrityError as exc:
        # Every draw taken, or (PostgreSQL) another instance stored the id since the look:
        # the change rolls back, vote included, and the caller gets a 503 to retry.
        if receipt_id_taken(exc):
            raise ReceiptIdTaken("another receipt has this receipt id") from exc
        raise
    assert stored is None  # no idempotency key, so never a repeat
    conn.execute(
        update(approvals)
        .where(
            and_(approvals.c.approval_id == approval.approval_id, approvals.c.state == "pending")
        )
        .values(state=state, decided_at=now, outcome_execution_id=record.execution_id)
    )
    _record_step(conn, approval, now, f"approval.{state}", "service",
                 {"outcome_execution_id": record.execution_id,
                  "outcome_receipt_id": record.receipt_id})  # fmt: skip
    return dataclasses.replace(approval, state=state, outcome_receipt=record.receipt)


def _record_step(
    conn: Connection,
    approval: Approval,
    now: datetime,
    action: str,
    actor: str,
    details: dict[str, Any],
) -> None:
    """Each step in both the org's audit trail and the ESCALATE execution's lineage."""
    details = {"approval_id": approval.approval_id, **details}
    append_audit(conn, AuditEvent(approval.org_id, now, actor, action, approval.approval_id,
                                  details))  # fmt: skip
    append_lineage(
        conn,
        event_id="lin_" + str(ULID()).lower(),
        execution_id=approval.execution_id,
        org_id=approval.org_id,
        occurred_at=now,
        kind=action.replace(".", "_"),
        details=details,
    )
