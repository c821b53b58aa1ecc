"""Paged reads of the audit trail and of executions (operator surface and console)."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request

from execauth.api.pagination import decode_cursor, encode_cursor, page_limit, time_param
from execauth.api.views import audit_view, execution_summary
from execauth.errors import InvalidRequest
from execauth.runtime import Runtime
from execauth.store.executions import ExecutionFilters
from execauth.tenancy.usage import DECISIONS
from execauth.wire_time import parse_timestamp


async def audit_page(runtime: Runtime, request: Request, org_id: str | None) -> dict[str, Any]:
    """Newest first; ``org_id=None`` is the whole service (platform admin only)."""
    limit = page_limit(request)
    before = None
    cursor = request.query_params.get("cursor")
    if cursor:
        at, event_id = decode_cursor(cursor, 2)
        try:
            before = (parse_timestamp(at), str(event_id))
        except (ValueError, TypeError) as exc:
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
    params = request.query_params
    decision = params.get("decision")
    if decision is not None and decision not in DECISIONS:
        raise InvalidRequest(f"decision must be one of {', '.join(DECISIONS)}")
    before = None
    if cursor := params.get("cursor"):
        at_ms, execution_id = decode_cursor(cursor, 2)
        if not isinstance(at_ms, int) or not isinstance(execution_id, str):
            raise InvalidRequest("cursor is not one this service issued")
        before = (at_ms, execution_id)
    filters = ExecutionFilters(
        surface=params.get("surface"),
        decision=decision,
        actor=params.get("actor"),
        since=time_param(request, "since"),
        until=time_param(request, "until"),
        before=before,
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
