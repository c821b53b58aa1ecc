"""Usage and billing figures, read-only: an org's month, and every org's for billing.

Shared by the console (``/console/v1``), the operator surface and the web console;
the counting itself is ``tenancy.usage`` (pure), over the stored rows read here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anyio.to_thread

from execauth.errors import InvalidRequest
from execauth.tenancy.orgs import Org
from execauth.tenancy.quota import QuotaCheck, month_bounds
from execauth.tenancy.usage import billing_rows, org_usage_report
from execauth.usecases.execute import ExecutionService


class UsageQueries:
    """Usage and billing figures (read-only; shared by console and operator)."""

    def __init__(self, service: ExecutionService) -> None:
        self._runtime = service.runtime

    async def org_usage(self, org: Org, month: str) -> dict[str, Any]:
        start, end = _month(month)
        executions = self._runtime.executions
        rows = await anyio.to_thread.run_sync(executions.usage_rows, org.org_id, start, end)
        used = await anyio.to_thread.run_sync(executions.executes_in_period, org.org_id, month)
        plan = self._runtime.plans.get(org.plan)
        quota = QuotaCheck(
            org.plan,
            month,
            plan.executes_per_month if plan is not None else None,
            end,
        )
        return org_usage_report(org, plan, quota, used, rows)

    async def billing_export(self, month: str) -> dict[str, Any]:
        start, end = _month(month)
        orgs = await anyio.to_thread.run_sync(self._runtime.control.list_orgs)
        rows = await anyio.to_thread.run_sync(self._runtime.executions.usage_rows, None, start, end)
        return {"month": month, "orgs": billing_rows(orgs, self._runtime.plans, rows)}


def _month(month: str) -> tuple[datetime, datetime]:
    try:
        return month_bounds(month)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
