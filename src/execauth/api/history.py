"""Paged reads of the audit trail and of executions (operator surface and console)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request

from execauth.api.pagination import (
    cursor_position,
    encode_cursor,
    page_limit,
    query_text,
    time_param,
    timestamp,
)
from execauth.api.views import audit_view, execution_summary
from execauth.errors import InvalidRequest
from execauth.serving.runtime import Runtime
from execauth.store.executions import ExecutionFilters
from execauth.tenancy.usage import DECISIONS


async def audit_page(runtime: Runtime, request: Request, org_id: str | None) -> dict[str, Any]:
    """Newest first; ``org_id=None`` is the whole service (platform admin only)."""
    limit = page_limit(request)
    before = None
    if position := cursor_position(request, str, str):
        at, event_id = position
        try:
            before = (timestamp(at, "cursor"), event_id)
        except InvalidRequest as exc:
            raise InvalidRequest("cursor is not one this service issued") from exc
    since, until = time_param(request, "since"), time_param(request, "until")
    events = await anyio.to_thread.run_sync(
        lambda: runtime.audit.page(org_id, limit=limit, before=before, since=since, until=until)
    )
    views = [audit_view(e) for e in events]
    next_cursor = (
        encode_cursor(views[-1]["occurred_at"], views[-1]["event_id"])
        if len(events) == limit
        else None
    )
    return {"events": views, "next_cursor": next_cursor}


async def executions_page(runtime: Runtime, request: Request, org_id: str) -> dict[str, Any]:
    """Filters: surface, decision, actor, since, until; keyset cursor, newest first."""
    decision = query_text(request, "decision")
    if decision is not None and decision not in DECISIONS:
        raise InvalidRequest(f"decision must be one of {', '.join(DECISIONS)}")
    position = cursor_position(request, int, str)
    filters = ExecutionFilters(
        surface=query_text(request, "surface"),
        decision=decision,
        actor=query_text(request, "actor"),
        since=time_param(request, "since"),
        until=time_param(request, "until"),
        before=(position[0], position[1]) if position else None,
    )
    limit = page_limit(request)
    records = await anyio.to_thread.run_sync(
        lambda: runtime.executions.page(org_id, filters, limit=limit)
    )
    next_cursor = (
        encode_cursor(records[-1].decided_at_ms, records[-1].execution_id)
        if len(records) == limit
        else None
    )
    return {"executions": [execution_summary(r) for r in records], "next_cursor": next_cursor}
