"""Usage reports: executes per month by decision and surface, against the plan's quota.

Built from the stored executions (each evaluated execute is one row; idempotent
repeats are not rows), so the report is what billing may charge for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from execauth.tenancy.orgs import Org, Plan
from execauth.tenancy.quota import QuotaCheck
from execauth.wire_time import format_timestamp

DECISIONS = ("PERMIT", "DENY", "SILENCE")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """How many executes of one org had one decision on one surface."""

    org_id: str
    surface: str
    decision: str
    count: int


def org_usage_report(
    org: Org, plan: Plan | None, quota: QuotaCheck, used: int, rows: Iterable[UsageRow]
) -> dict[str, Any]:
    by_decision = dict.fromkeys(DECISIONS, 0)
    by_surface: dict[str, dict[str, int]] = {}
    for row in rows:
        by_decision[row.decision] = by_decision.get(row.decision, 0) + row.count
        surface = by_surface.setdefault(row.surface, {**dict.fromkeys(DECISIONS, 0), "total": 0})
        surface[row.decision] = surface.get(row.decision, 0) + row.count
        surface["total"] += row.count
    limit = plan.executes_per_month if plan is not None else None
    return {
        "org_id": org.org_id,
        "month": quota.period,
        "plan": org.plan,
        "quota": {
            "limit": limit,
            "used": used,
            "remaining": None if limit is None else max(0, limit - used),
            "resets_at": format_timestamp(quota.resets_at),
        },
        "executes": {
            "total": sum(by_decision.values()),
            "by_decision": by_decision,
            "by_surface": dict(sorted(by_surface.items())),
        },
    }


def billing_rows(
    orgs: Iterable[Org], plans: dict[str, Plan], rows: Iterable[UsageRow]
) -> list[dict[str, Any]]:
    """One line per organization: what an external billing system needs."""
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        counts = totals.setdefault(row.org_id, dict.fromkeys(DECISIONS, 0))
        counts[row.decision] = counts.get(row.decision, 0) + row.count
    lines = []
    for org in orgs:
        counts = totals.get(org.org_id, dict.fromkeys(DECISIONS, 0))
        plan = plans.get(org.plan)
        lines.append(
            {
                "org_id": org.org_id,
                "name": org.name,
                "plan": org.plan,
                "executes": sum(counts.values()),
                "permit": counts["PERMIT"],
                "deny": counts["DENY"],
                "silence": counts["SILENCE"],
                "quota_limit": plan.executes_per_month if plan is not None else None,
            }
        )
    return lines
