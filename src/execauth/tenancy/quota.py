"""Monthly execute quotas: which period a decision counts in and what its plan allows.

Counting happens in the same transaction that stores the receipt
(``store.execution_writes.insert_execution``), which is what makes the count exact
under concurrency and across instances sharing a database.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime

from execauth.errors import QuotaExceeded
from execauth.tenancy.orgs import Plan
from execauth.wire_time import format_timestamp


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    plan: str
    period: str  # "YYYY-MM", UTC
    limit: int | None  # None: counted, never refused
    resets_at: datetime

    def exceeded(self, now: datetime) -> QuotaExceeded:
        # Rounded up: a client that waits exactly this long must not arrive early.
        retry_after = max(1, math.ceil((self.resets_at - now).total_seconds()))
        return QuotaExceeded(
            f"plan {self.plan!r} allows {self.limit} executes per month; the quota resets at "
            f"{format_timestamp(self.resets_at)}",
            headers={"Retry-After": str(retry_after)},
        )


def month_period(now: datetime) -> str:
    # Formatted by hand: strftime's %Y drops leading zeros below year 1000, and this runs
    # on every execute.
    now = now.astimezone(UTC)
    return f"{now.year:04d}-{now.month:02d}"


def next_month_start(now: datetime) -> datetime:
    now = now.astimezone(UTC)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def quota_for(plan: Plan, now: datetime) -> QuotaCheck:
    now = now.astimezone(UTC)
    return _monthly_quota(plan, now.year, now.month)


# Every execute asks; the answer changes once a month per plan.
@functools.lru_cache(maxsize=64)
def _monthly_quota(plan: Plan, year: int, month: int) -> QuotaCheck:
    start = datetime(year, month, 1, tzinfo=UTC)
    limit = plan.executes_per_month
    return QuotaCheck(plan.name, month_period(start), limit, next_month_start(start))


def month_bounds(period: str) -> tuple[datetime, datetime]:
    """``"2026-11"`` → [2026-11-01T00:00Z, 2026-12-01T00:00Z); ``ValueError`` if malformed."""
    try:
        start = datetime.strptime(period, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"month must be YYYY-MM, got {period!r}") from None
    if month_period(start) != period:  # strptime accepts "2026-1"
        raise ValueError(f"month must be YYYY-MM, got {period!r}")
    return start, next_month_start(start)
