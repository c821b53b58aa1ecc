"""Plans and monthly quota math (execauth.tenancy.orgs, execauth.tenancy.quota)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from execauth.errors import QuotaExceeded
from execauth.tenancy.orgs import DEFAULT_PLANS, Org, Plan
from execauth.tenancy.quota import month_bounds, month_period, next_month_start, quota_for


def test_free_plan_is_1000_executes_a_month_and_5000_requests_a_minute() -> None:
    free = DEFAULT_PLANS["free"]
    assert (free.executes_per_month, free.requests_per_minute) == (1_000, 5_000)


def test_standard_plan_has_the_standard_rate_limit() -> None:
    assert DEFAULT_PLANS["standard"].requests_per_minute == 5_000


def test_enterprise_plan_bursts_to_10000_a_minute() -> None:
    assert DEFAULT_PLANS["enterprise"].requests_per_minute == 10_000


def test_paid_plans_allow_more_than_the_free_plan() -> None:
    free = DEFAULT_PLANS["free"].executes_per_month
    assert free is not None
    for name in ("standard", "enterprise"):
        limit = DEFAULT_PLANS[name].executes_per_month
        assert limit is None or limit > free, name


@pytest.mark.parametrize(
    ("moment", "period"),
    [
        (datetime(2026, 1, 1, 0, 0, tzinfo=UTC), "2026-01"),
        (datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), "2026-12"),
        (datetime(2028, 2, 29, 12, tzinfo=UTC), "2028-02"),
    ],
)
def test_period_is_the_utc_calendar_month(moment: datetime, period: str) -> None:
    assert month_period(moment) == period


def test_period_is_taken_in_utc_not_local_time() -> None:
    # 23:30 on 31 January in New York is already February in UTC.
    new_york = timezone(timedelta(hours=-5))
    assert month_period(datetime(2026, 1, 31, 23, 30, tzinfo=new_york)) == "2026-02"


@pytest.mark.parametrize(
    ("moment", "reset"),
    [
        (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        (datetime(2026, 12, 1, 0, 0, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        (datetime(2026, 1, 31, 12, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)),
        (datetime(2028, 2, 29, 23, 59, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC)),
        (datetime(2027, 2, 28, 23, 59, tzinfo=UTC), datetime(2027, 3, 1, tzinfo=UTC)),
        (datetime(2026, 6, 1, 0, 0, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)),
    ],
)
def test_quota_resets_at_the_start_of_the_next_utc_month(moment: datetime, reset: datetime) -> None:
    assert next_month_start(moment) == reset


def test_reset_is_computed_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    # 1 March 05:00 in Tokyo is still 28 February in UTC.
    assert next_month_start(datetime(2026, 3, 1, 5, tzinfo=tokyo)) == datetime(
        2026, 3, 1, tzinfo=UTC
    )


def test_reset_is_always_after_the_moment() -> None:
    moment = datetime(2026, 3, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    assert next_month_start(moment) > moment


@pytest.mark.parametrize("name", sorted(DEFAULT_PLANS))
def test_quota_for_each_plan_carries_its_monthly_limit(name: str) -> None:
    plan = DEFAULT_PLANS[name]
    check = quota_for(plan, datetime(2026, 3, 14, tzinfo=UTC))
    assert check.plan == name
    assert check.limit == plan.executes_per_month
    assert check.period == "2026-03"
    assert check.resets_at == datetime(2026, 4, 1, tzinfo=UTC)


def test_quota_follows_the_utc_month_across_a_month_end() -> None:
    plan = DEFAULT_PLANS["free"]
    last = quota_for(plan, datetime(2026, 3, 31, 23, 59, 59, 999_000, tzinfo=UTC))
    first = quota_for(plan, datetime(2026, 4, 1, tzinfo=UTC))
    assert (last.period, last.resets_at) == ("2026-03", datetime(2026, 4, 1, tzinfo=UTC))
    assert (first.period, first.resets_at) == ("2026-04", datetime(2026, 5, 1, tzinfo=UTC))


def test_quota_of_a_moment_in_another_zone_counts_in_its_utc_month() -> None:
    tokyo = timezone(timedelta(hours=9))
    check = quota_for(DEFAULT_PLANS["free"], datetime(2026, 4, 1, 5, tzinfo=tokyo))
    assert check.period == "2026-03"


def test_two_plans_of_one_name_keep_their_own_limits() -> None:
    now = datetime(2026, 3, 14, tzinfo=UTC)
    assert quota_for(Plan("team", 10, 100), now).limit == 10
    assert quota_for(Plan("team", 20, 100), now).limit == 20


def test_unmetered_plan_has_no_limit() -> None:
    check = quota_for(Plan("unmetered", None, 100), datetime(2026, 3, 14, tzinfo=UTC))
    assert check.limit is None


def test_exceeded_quota_is_429_plan_limit_exceeded() -> None:
    now = datetime(2026, 3, 31, 23, 0, tzinfo=UTC)
    error = quota_for(DEFAULT_PLANS["free"], now).exceeded(now)
    assert isinstance(error, QuotaExceeded)
    assert error.status == 429
    assert error.code == "SERVICE_PLAN_LIMIT_EXCEEDED"


def test_exceeded_quota_retry_after_is_the_seconds_until_the_reset() -> None:
    now = datetime(2026, 3, 31, 23, 0, tzinfo=UTC)
    error = quota_for(DEFAULT_PLANS["free"], now).exceeded(now)
    assert error.headers["Retry-After"] == "3600"


def test_exceeded_quota_retry_after_is_at_least_one_second() -> None:
    now = datetime(2026, 3, 31, 23, 59, 59, 999_000, tzinfo=UTC)
    error = quota_for(DEFAULT_PLANS["free"], now).exceeded(now)
    assert error.headers["Retry-After"] == "1"


def test_retry_after_rounds_up_so_a_retry_never_arrives_before_the_reset() -> None:
    now = datetime(2026, 3, 31, 23, 59, 58, 500_000, tzinfo=UTC)  # 1.5 s before the reset
    error = quota_for(DEFAULT_PLANS["free"], now).exceeded(now)
    assert error.headers["Retry-After"] == "2"


def test_exceeded_quota_message_names_the_plan_limit_and_reset() -> None:
    now = datetime(2026, 12, 15, tzinfo=UTC)
    message = quota_for(DEFAULT_PLANS["free"], now).exceeded(now).message
    assert "'free'" in message
    assert "1000" in message
    assert "2027-01-01T00:00:00.000Z" in message


def test_policies_see_only_the_orgs_stable_facts() -> None:
    org = Org(
        "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "Acme", "free", "a", datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert org.facts() == {"id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "plan": "free"}


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("2026-11", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
        ("2028-02", datetime(2028, 2, 1, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC)),
    ],
)
def test_month_bounds_are_the_half_open_utc_month(
    period: str, start: datetime, end: datetime
) -> None:
    assert month_bounds(period) == (start, end)


@pytest.mark.parametrize("period", ["2026-1", "2026-13", "2026-00", "26-01", "2026/01", "", "x"])
def test_malformed_month_is_refused(period: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM"):
        month_bounds(period)
