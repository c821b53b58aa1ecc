"""Repository of decision-stream subscriptions and their delivery cursors.

A subscription's cursor (``next_index``) is a position in its organization's log, so
what is delivered comes from the durable store, in log order, and a restart resumes
where the last acknowledged delivery ended. Instances share the work through a lease
per subscription: the conditional UPDATE that takes it is the only arbiter.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, and_, delete, func, insert, or_, select, update

from execauth.approvals import Vote
from execauth.receipts import execution_id_for
from execauth.store.audit import append_audit
from execauth.store.tables import approval_votes, executions, log_leaves, subscriptions
from execauth.streaming.events import DecisionEvent, approval_state, approval_view, event_type
from execauth.tenancy.audit import AuditEvent

ACTIVE = "active"
DEAD_LETTER = "dead_letter"
PAUSED = "paused"
STATES = (ACTIVE, DEAD_LETTER, PAUSED)


@dataclass(frozen=True, slots=True)
class Subscription:
    subscription_id: str
    org_id: str
    name: str
    sink: str
    target: str
    sealed_secret: bytes | None
    state: str
    next_index: int
    delivered: int
    attempts: int
    last_error: str | None
    next_attempt_at: datetime
    created_at: datetime
    delivered_at: datetime | None
    event_types: str | None = None  # JSON list (streaming.events.parse_event_types); None: all

    @property
    def events(self) -> tuple[str, ...] | None:
        """The types this subscription delivers; ``None``: every event."""
        return None if self.event_types is None else tuple(json.loads(self.event_types))


_COLUMNS = [getattr(subscriptions.c, f) for f in Subscription.__dataclass_fields__]


class SubscriptionStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # the control plane --------------------------------------------------------------
    def create(self, subscription: Subscription, audit: AuditEvent) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(subscriptions).values(
                    **{f: getattr(subscription, f) for f in Subscription.__dataclass_fields__},
                    lease_owner=None,
                    lease_until=None,
                )
            )
            append_audit(conn, audit)

    def list_for_org(self, org_id: str) -> list[Subscription]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(*_COLUMNS)
                .where(subscriptions.c.org_id == org_id)
                .order_by(subscriptions.c.created_at, subscriptions.c.subscription_id)
            ).all()
        return [Subscription(*row) for row in rows]

    def get(self, org_id: str, subscription_id: str) -> Subscription | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*_COLUMNS).where(
                    subscriptions.c.org_id == org_id,
                    subscriptions.c.subscription_id == subscription_id,
                )
            ).first()
        return Subscription(*row) if row else None

    def delete(self, org_id: str, subscription_id: str, audit: AuditEvent) -> bool:
        with self.engine.begin() as conn:
            gone = conn.execute(
                delete(subscriptions).where(
                    subscriptions.c.org_id == org_id,
                    subscriptions.c.subscription_id == subscription_id,
                )
            ).rowcount
            if gone:
                append_audit(conn, audit)
        return bool(gone)

    def set_state(
        self,
        org_id: str,
        subscription_id: str,
        state: str,
        now: datetime,
        audit: AuditEvent,
        *,
        next_index: int | None = None,
    ) -> bool:
        """Pause, or resume (``active``) from where it stopped or from ``next_index``."""
        values: dict[str, object] = {"state": state, "attempts": 0, "next_attempt_at": now}
        if next_index is not None:
            values["next_index"] = next_index
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(subscriptions)
                .where(
                    subscriptions.c.org_id == org_id,
                    subscriptions.c.subscription_id == subscription_id,
                )
                .values(**values)
            ).rowcount
            if changed:
                append_audit(conn, audit)
        return bool(changed)

    def set_event_types(
        self, org_id: str, subscription_id: str, event_types: str | None, audit: AuditEvent
    ) -> bool:
        """Change which event types it delivers (from its cursor on; nothing is re-sent)."""
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(subscriptions)
                .where(
                    subscriptions.c.org_id == org_id,
                    subscriptions.c.subscription_id == subscription_id,
                )
                .values(event_types=event_types)
            ).rowcount
            if changed:
                append_audit(conn, audit)
        return bool(changed)

    def log_size(self, org_id: str) -> int:
        """How many entries the org's log holds: the index the next one will get."""
        with self.engine.connect() as conn:
            top = conn.execute(
                select(func.max(log_leaves.c.log_index)).where(log_leaves.c.org_id == org_id)
            ).scalar_one_or_none()
        return 0 if top is None else int(top) + 1

    # delivery -----------------------------------------------------------------------
    def claim_due(
        self, owner: str, now: datetime, lease: timedelta, limit: int = 64
    ) -> list[Subscription]:
        """Take the lease of each active subscription that is due and free (or ours)."""
        free = or_(
            subscriptions.c.lease_owner.is_(None),
            subscriptions.c.lease_owner == owner,
            subscriptions.c.lease_until < now,
        )
        due = and_(subscriptions.c.state == ACTIVE, subscriptions.c.next_attempt_at <= now, free)
        claimed: list[Subscription] = []
        with self.engine.connect() as conn:
            candidates = conn.execute(
                select(subscriptions.c.subscription_id)
                .where(due)
                .order_by(subscriptions.c.next_attempt_at)
                .limit(limit)
            ).scalars()
            ids = list(candidates)
        for subscription_id in ids:
            with self.engine.begin() as conn:
                row = conn.execute(
                    update(subscriptions)
                    .where(subscriptions.c.subscription_id == subscription_id, due)
                    .values(lease_owner=owner, lease_until=now + lease)
                    .returning(*_COLUMNS)
                ).first()
            if row is not None:
                claimed.append(Subscription(*row))
        return claimed

    def read_events(self, org_id: str, from_index: int, limit: int) -> list[DecisionEvent]:
        """The org's log entries from ``from_index`` on, with their receipts, in order."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    log_leaves.c.log_index,
                    log_leaves.c.execution_id,
                    log_leaves.c.sequenced_at,
                    executions.c.receipt,
                    executions.c.decision,
                    executions.c.evaluation_input,
                )
                .join(executions, executions.c.execution_id == log_leaves.c.execution_id)
                .where(log_leaves.c.org_id == org_id, log_leaves.c.log_index >= from_index)
                .order_by(log_leaves.c.log_index)
                .limit(limit)
            ).all()
            events = []
            for index, execution_id, sequenced_at, receipt, decision, evaluation_input in rows:
                event = DecisionEvent(
                    org_id, int(index), execution_id, sequenced_at, bytes(receipt)
                )
                # Only an ESCALATE or an approval's outcome is parsed here (the bytes test is a
                # cheap pre-filter): every other entry stays an ``execauth.decision``.
                if decision == "ESCALATE" or b'"approval_outcome"' in event.receipt:
                    event = _approval_step(conn, event, evaluation_input)
                events.append(event)
        return events

    def advance(
        self,
        subscription_id: str,
        owner: str,
        from_index: int,
        to_index: int,
        now: datetime,
        *,
        delivered: int | None = None,
    ) -> bool:
        """Record that everything before ``to_index`` was acknowledged.

        ``delivered``: how many of those entries were sent (fewer when the subscription
        filters event types); by default all of them.

        Guarded by the lease and the old position: an instance whose lease ran out while
        it delivered cannot move a cursor another instance has moved since (what it
        delivered is then delivered twice, which at least once allows, never skipped).
        """
        with self.engine.begin() as conn:
            moved = conn.execute(
                update(subscriptions)
                .where(
                    subscriptions.c.subscription_id == subscription_id,
                    subscriptions.c.lease_owner == owner,
                    subscriptions.c.next_index == from_index,
                )
                .values(
                    next_index=to_index,
                    delivered=subscriptions.c.delivered
                    + (to_index - from_index if delivered is None else delivered),
                    attempts=0,
                    last_error=None,
                    delivered_at=now,
                )
            ).rowcount
        return bool(moved)

    def record_failure(
        self,
        subscription_id: str,
        owner: str,
        *,
        attempts: int,
        error: str,
        retry_at: datetime,
        dead: bool,
    ) -> None:
        """Back off; after the last allowed attempt the subscription waits in dead letter."""
        with self.engine.begin() as conn:
            conn.execute(
                update(subscriptions)
                .where(
                    subscriptions.c.subscription_id == subscription_id,
                    subscriptions.c.lease_owner == owner,
                )
                .values(
                    attempts=attempts,
                    last_error=error[:2000],
                    next_attempt_at=retry_at,
                    state=DEAD_LETTER if dead else ACTIVE,
                    lease_owner=None,
                    lease_until=None,
                )
            )

    def release(self, owner: str) -> None:
        """Give up every lease ``owner`` holds (a clean shutdown), so others take over now."""
        with self.engine.begin() as conn:
            conn.execute(
                update(subscriptions)
                .where(subscriptions.c.lease_owner == owner)
                .values(lease_owner=None, lease_until=None)
            )


def _approval_step(conn: Connection, event: DecisionEvent, evaluation_input: str) -> DecisionEvent:
    """``event`` typed and given its ``approval`` object when its receipt is an approval's step.

    Everything read is final for this entry: the ESCALATE receipt, the terms stored with
    it (an outcome carries the same evaluation input), and a final approval's votes.
    """
    receipt: dict[str, Any] = msgspec.json.decode(event.receipt)
    state = approval_state(receipt)
    if state is None or "approval_id" not in receipt:
        return event
    terms = json.loads(evaluation_input).get("approval", {})
    if state == "pending":
        escalation, votes, decided_at = receipt, [], None
    else:
        escalation_bytes = conn.execute(
            select(executions.c.receipt).where(
                executions.c.execution_id == execution_id_for(str(receipt["approval_id"]))
            )
        ).scalar_one_or_none()
        if escalation_bytes is None:  # cannot happen: the outcome is issued from it
            return dataclasses.replace(event, kind=event_type(receipt))
        escalation = msgspec.json.decode(escalation_bytes)
        query = (
            select(approval_votes)
            .where(approval_votes.c.approval_id == receipt["approval_id"])
            .order_by(approval_votes.c.voted_at, approval_votes.c.approver_key_id)
        )
        votes = [
            Vote(r["approver_key_id"], r["vote"], r["actor"], r["reason"], r["voted_at"]).as_json()
            for r in conn.execute(query).mappings()
        ]
        decided_at = receipt.get("timestamp")
    view = approval_view(state, escalation, terms, votes, decided_at)
    return dataclasses.replace(event, kind=event_type(receipt), approval=view)
