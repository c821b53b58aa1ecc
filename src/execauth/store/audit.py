"""Reading and appending the audit trail (tenancy.audit) and execution lineage."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, insert, or_, select

from execauth.store.tables import audit_events, execution_events
from execauth.tenancy.audit import AuditEvent


def append_audit(conn: Connection, *events: AuditEvent) -> None:
    """Append within the caller's transaction: the change and its record commit together."""
    for event in events:
        conn.execute(
            insert(audit_events).values(
                event_id=event.event_id,
                org_id=event.org_id,
                occurred_at=event.occurred_at,
                actor=event.actor,
                action=event.action,
                target=event.target,
                details=json.dumps(event.details, ensure_ascii=False, sort_keys=True),
            )
        )


class AuditStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def append(self, *events: AuditEvent) -> None:
        with self.engine.begin() as conn:
            append_audit(conn, *events)

    def page(
        self,
        org_id: str | None,
        *,
        limit: int,
        before: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[AuditEvent]:
        """Newest first. An org sees its own events and the service-wide ones;
        ``org_id=None`` (the platform admin) sees everything."""
        query = select(audit_events)
        if org_id is not None:
            query = query.where(
                or_(audit_events.c.org_id == org_id, audit_events.c.org_id.is_(None))
            )
        if before is not None:
            at, event_id = before
            # Spelled out (not a row-value comparison) so the UTC column type binds ``at``.
            query = query.where(
                or_(
                    audit_events.c.occurred_at < at,
                    and_(audit_events.c.occurred_at == at, audit_events.c.event_id < event_id),
                )
            )
        if since is not None:
            query = query.where(audit_events.c.occurred_at >= since)
        if until is not None:
            query = query.where(audit_events.c.occurred_at < until)
        query = query.order_by(
            audit_events.c.occurred_at.desc(), audit_events.c.event_id.desc()
        ).limit(limit)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [_event(row) for row in rows]


def _event(row: Any) -> AuditEvent:
    return AuditEvent(
        org_id=row["org_id"],
        occurred_at=row["occurred_at"],
        actor=row["actor"],
        action=row["action"],
        target=row["target"],
        details=json.loads(row["details"]),
        event_id=row["event_id"],
    )


def append_lineage(
    conn: Connection,
    *,
    event_id: str,
    execution_id: str,
    org_id: str,
    occurred_at: datetime,
    kind: str,
    details: dict[str, Any],
) -> None:
    conn.execute(
        insert(execution_events).values(
            event_id=event_id,
            execution_id=execution_id,
            org_id=org_id,
            occurred_at=occurred_at,
            kind=kind,
            details=json.dumps(details, ensure_ascii=False, sort_keys=True),
        )
    )
