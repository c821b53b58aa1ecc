"""Monthly execute quotas: which period a decision counts in and what its plan allows.

Counting happens in the same transaction that stores the receipt
(``store.execution_writes.insert_execution``), which is what makes the count exact
under concurrency and across instances sharing a database.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
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


# Enough for every limited org a process serves at once; past it, the oldest is forgotten
# and costs one full decision to learn again.
MAX_USED_UP_QUOTAS = 4_096


class UsedUpQuotas:
    """The limited quotas this process was told are used up, for a short while.

    Two places keep one. A gateway (``ExecutionService``) remembers the writer's refusals,
    so that the next request counting against the same quota is refused before it is
    evaluated, signed and sent to the writer; a tenant past its monthly limit would
    otherwise cost a decision each time it asks. The writer (``ReceiptWriter``) remembers
    the quotas its transaction found used up, so that a batch counting against one skips
    the one statement, which could only store nothing. Counters only grow within a
    period, so what was used up stays used up; the gateway's entries still last only
    ``ttl`` seconds, so that a counter lowered by hand in the database is followed
    within that time (the writer's only choose its fast path, and never expire). The
    quota's plan, period and limit are part of the key: a new month, a new plan or a new
    limit is a quota not known to be used up.
    """

    def __init__(
        self,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_USED_UP_QUOTAS,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._until: dict[tuple[str, QuotaCheck], float] = {}

    def remember(self, org_id: str, quota: QuotaCheck) -> None:
        """``quota`` refused ``org_id``'s record: used up, as far as this process knows."""
        if quota.limit is None:
            return  # never refused; nothing to remember
        key = (org_id, quota)
        if key not in self._until and len(self._until) >= self._max_entries:
            del self._until[next(iter(self._until))]  # the oldest first
        self._until[key] = self._clock() + self._ttl

    def holds(self, org_id: str, quota: QuotaCheck) -> bool:
        """Whether ``quota`` is known to be used up for ``org_id`` (False: not known)."""
        if not self._until:
            return False  # every org within its limit: no key to build
        key = (org_id, quota)
        until = self._until.get(key)
        if until is None:
            return False
        if self._clock() >= until:
            del self._until[key]
            return False
        return True


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
