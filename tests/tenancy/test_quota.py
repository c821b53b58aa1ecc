"""Monthly quota (docs/api.md): exact under concurrency, repeats and 4xx free."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest

from execauth.config import Settings
from execauth.serving.runtime import Runtime
from execauth.tenancy.orgs import Plan
from execauth.tenancy.quota import (
    UsedUpQuotas,
    month_bounds,
    month_period,
    next_month_start,
    quota_for,
)
from tests.conftest import HandMovedClock, Tenant, small_plans

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


def test_quota_period_is_the_utc_calendar_month() -> None:
    assert month_period(datetime(2026, 11, 30, 23, 59, tzinfo=UTC)) == "2026-11"


def test_december_quota_resets_on_the_first_of_january() -> None:
    assert next_month_start(datetime(2026, 12, 31, 12, tzinfo=UTC)) == datetime(
        2027, 1, 1, tzinfo=UTC
    )


def test_free_plan_allows_1000_executes_a_month() -> None:
    assert quota_for(Settings().plan_catalog()["free"], datetime.now(UTC)).limit == 1000


async def exhaust(client: httpx.AsyncClient, tenant: Tenant, count: int) -> Counter[int]:
    """Send ``count`` concurrent executes; return how many got each status."""
    semaphore = asyncio.Semaphore(200)

    async def one() -> int:
        async with semaphore:
            response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
            return response.status_code

    return Counter(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.anyio
async def test_1100_concurrent_executes_yield_exactly_1000_receipts(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    statuses = await exhaust(client, tenant, 1100)
    assert statuses == Counter({200: 1000, 429: 100})
    assert runtime.executions.count(tenant.org_id) == 1000
    period = month_period(datetime.now(UTC))
    assert runtime.executions.executes_in_period(tenant.org_id, period) == 1000


# A smaller free plan, so tests about the boundary need not send 1,000 requests.
free_plan_of_five = pytest.mark.parametrize("plans", [small_plans(free_executes=5)], ids=["free5"])


@pytest.mark.anyio
@free_plan_of_five
async def test_request_after_the_last_allowed_one_names_plan_and_reset(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await exhaust(client, tenant, 5)
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    assert response.status_code == 429
    body = response.json()
    assert body["error"] == "SERVICE_PLAN_LIMIT_EXCEEDED"
    assert "'free'" in body["message"]
    assert format(next_month_start(datetime.now(UTC)), "%Y-%m-01T00:00:00") in body["message"]
    assert int(response.headers["retry-after"]) > 0
    assert "decision" not in body


@pytest.mark.anyio
@free_plan_of_five
async def test_idempotent_repeats_are_answered_and_not_counted(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    first = await client.post(
        "/v1/execute", json={**PERMIT, "request_id": "once"}, headers=tenant.auth
    )
    await exhaust(client, tenant, 4)
    repeat = await client.post(
        "/v1/execute", json={**PERMIT, "request_id": "once"}, headers=tenant.auth
    )
    assert repeat.status_code == 200
    assert repeat.content == first.content
    period = month_period(datetime.now(UTC))
    assert runtime.executions.executes_in_period(tenant.org_id, period) == 5


@pytest.mark.anyio
async def test_rejected_requests_are_not_counted(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    await client.post("/v1/execute", json={"actor": "no-surface"}, headers=tenant.auth)
    await client.post("/v1/execute", json={"surface": "unknown.surface"}, headers=tenant.auth)
    period = month_period(datetime.now(UTC))
    assert runtime.executions.executes_in_period(tenant.org_id, period) == 0


@pytest.mark.anyio
async def test_deny_and_silence_count_as_evaluated_executes(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    await client.post(
        "/v1/execute", json={**PERMIT, "context": {"branch": "x"}}, headers=tenant.auth
    )
    await client.post("/v1/execute", json={"surface": "deploy.production"}, headers=tenant.auth)
    period = month_period(datetime.now(UTC))
    assert runtime.executions.executes_in_period(tenant.org_id, period) == 2


@pytest.mark.parametrize(
    ("moment", "period"),
    [
        (datetime(2026, 11, 30, 23, 59, tzinfo=UTC), "2026-11"),
        (datetime(999, 1, 5, tzinfo=UTC), "0999-01"),
    ],
)
def test_the_quota_period_is_the_utc_month_with_a_four_digit_year(
    moment: datetime, period: str
) -> None:
    assert month_period(moment) == period
    assert month_bounds(period)[0] == datetime(moment.year, moment.month, 1, tzinfo=UTC)


# --- quotas a process was told are used up (UsedUpQuotas) ---------------------------------
TEAM = Plan("team", 10, 100)
NOV = datetime(2026, 11, 29, 12, tzinfo=UTC)


def test_a_quota_refused_once_is_known_used_up() -> None:
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock())
    used_up.remember("org_a", quota_for(TEAM, NOV))

    assert used_up.holds("org_a", quota_for(TEAM, NOV))


def test_a_used_up_quota_is_forgotten_after_the_ttl() -> None:
    clock = HandMovedClock()
    used_up = UsedUpQuotas(ttl=1.0, clock=clock)
    used_up.remember("org_a", quota_for(TEAM, NOV))

    clock.now += 0.999
    assert used_up.holds("org_a", quota_for(TEAM, NOV))
    clock.now += 0.001
    assert not used_up.holds("org_a", quota_for(TEAM, NOV))


def test_another_org_on_the_same_quota_is_not_known_used_up() -> None:
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock())
    used_up.remember("org_a", quota_for(TEAM, NOV))

    assert not used_up.holds("org_b", quota_for(TEAM, NOV))


def test_the_next_month_is_not_known_used_up() -> None:
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock())
    used_up.remember("org_a", quota_for(TEAM, datetime(2026, 11, 30, 23, 59, 59, tzinfo=UTC)))

    assert not used_up.holds("org_a", quota_for(TEAM, datetime(2026, 12, 1, tzinfo=UTC)))


@pytest.mark.parametrize(
    "plan", [Plan("team", 20, 100), Plan("business", 10, 100)], ids=["new limit", "new plan"]
)
def test_a_changed_plan_or_limit_is_not_known_used_up(plan: Plan) -> None:
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock())
    used_up.remember("org_a", quota_for(TEAM, NOV))

    assert not used_up.holds("org_a", quota_for(plan, NOV))


def test_a_quota_without_a_limit_is_never_known_used_up() -> None:
    unmetered = quota_for(Plan("unmetered", None, 100), NOV)
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock())
    used_up.remember("org_a", unmetered)

    assert not used_up.holds("org_a", unmetered)


def test_past_its_size_the_oldest_used_up_quota_is_forgotten_first() -> None:
    used_up = UsedUpQuotas(ttl=1.0, clock=HandMovedClock(), max_entries=2)
    quota = quota_for(TEAM, NOV)
    for org_id in ("org_a", "org_b", "org_c"):
        used_up.remember(org_id, quota)

    assert [used_up.holds(o, quota) for o in ("org_a", "org_b", "org_c")] == [False, True, True]
