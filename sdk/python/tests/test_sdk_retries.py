"""Retries: exponential backoff with full jitter on 429/5xx and connection errors,
``Retry-After`` honoured, the same idempotency key on every attempt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from conftest import ScriptedService, Sleeps
from execauth_client import (
    AsyncClient,
    Client,
    InvalidRequest,
    QuotaExceeded,
    RateLimited,
    ServiceUnavailable,
)
from execauth_client._wire import Backoff

BASE = "https://execauth.test"


def client(
    service: ScriptedService, sleeps: Sleeps, *, jitter: float = 1.0, **kw: object
) -> Client:
    return Client(
        BASE,
        "service_live_test",
        transport=httpx.MockTransport(service),
        sleep=sleeps,
        backoff=Backoff(jitter=lambda: jitter),
        **kw,  # type: ignore[arg-type]
    )


def unavailable() -> httpx.Response:
    return httpx.Response(503, json={"error": "service_unavailable", "message": "busy"})


def rate_limited(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(
        429, json={"error": "rate_limited", "message": "slow down"}, headers=headers
    )


def test_503_is_retried_with_exponential_backoff(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [unavailable(), unavailable()]
    with client(service, sleeps) as c:
        receipt = c.authorize("deploy.production", actor="release-bot")
    assert receipt.decision == "PERMIT"
    assert sleeps.calls == [0.5, 1.0]
    assert len(service.requests) == 3


def test_backoff_uses_full_jitter_and_a_cap(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [unavailable()] * 5
    with Client(
        BASE,
        "k",
        transport=httpx.MockTransport(service),
        sleep=sleeps,
        max_retries=5,
        backoff=Backoff(base=1.0, cap=4.0, jitter=lambda: 0.25),
    ) as c:
        c.authorize("deploy.production")
    assert sleeps.calls == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_the_same_idempotency_key_is_sent_on_every_retry(
    service: ScriptedService, sleeps: Sleeps
) -> None:
    service.script = [unavailable(), rate_limited(), httpx.ConnectError("refused")]
    with client(service, sleeps) as c:
        receipt = c.authorize("deploy.production")
    keys = {r.headers["Idempotency-Key"] for r in service.requests}
    body_keys = {b["idempotency_key"] for b in service.bodies}
    assert len(service.requests) == 4
    assert keys == body_keys
    assert len(keys) == 1
    assert receipt.request_id == keys.pop()


def test_a_callers_idempotency_key_is_used(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [unavailable()]
    with client(service, sleeps) as c:
        c.authorize("deploy.production", idempotency_key="deploy-4f2a9c1")
    assert [b["idempotency_key"] for b in service.bodies] == ["deploy-4f2a9c1"] * 2


def test_each_call_gets_a_fresh_idempotency_key(service: ScriptedService, sleeps: Sleeps) -> None:
    with client(service, sleeps) as c:
        c.authorize("deploy.production")
        c.authorize("deploy.production")
    first, second = (b["idempotency_key"] for b in service.bodies)
    assert first != second


def test_retry_after_seconds_is_honoured(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [rate_limited("7")]
    with client(service, sleeps) as c:
        c.authorize("deploy.production")
    assert sleeps.calls == [7.0]


def test_retry_after_http_date_is_honoured(service: ScriptedService, sleeps: Sleeps) -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    service.script = [rate_limited(format_datetime(when, usegmt=True))]
    with client(service, sleeps) as c:
        c.authorize("deploy.production")
    assert 25 <= sleeps.calls[0] <= 30


def test_a_retry_after_beyond_the_limit_is_not_waited_for(
    service: ScriptedService, sleeps: Sleeps
) -> None:
    service.script = [rate_limited("3600")]
    with client(service, sleeps) as c, pytest.raises(RateLimited) as raised:
        c.authorize("deploy.production")
    assert raised.value.retry_after == 3600
    assert sleeps.calls == []


def test_rate_limited_is_raised_when_retries_run_out(
    service: ScriptedService, sleeps: Sleeps
) -> None:
    service.script = [rate_limited("1")] * 4
    with client(service, sleeps, max_retries=3) as c, pytest.raises(RateLimited) as raised:
        c.authorize("deploy.production")
    assert len(service.requests) == 4
    assert raised.value.status == 429
    assert raised.value.code == "rate_limited"


def test_connection_errors_are_retried_then_raised_as_unavailable(
    service: ScriptedService, sleeps: Sleeps
) -> None:
    service.script = [httpx.ConnectError("refused")] * 3
    with client(service, sleeps, max_retries=2) as c, pytest.raises(ServiceUnavailable) as raised:
        c.authorize("deploy.production")
    assert raised.value.code == "unreachable"
    assert sleeps.calls == [0.5, 1.0]


def test_timeouts_are_retried(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [httpx.ReadTimeout("slow")]
    with client(service, sleeps) as c:
        assert c.authorize("deploy.production").decision == "PERMIT"


def test_an_exhausted_quota_is_not_retried(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [
        httpx.Response(429, json={"error": "SERVICE_PLAN_LIMIT_EXCEEDED", "message": "quota"})
    ]
    with client(service, sleeps) as c, pytest.raises(QuotaExceeded):
        c.authorize("deploy.production")
    assert sleeps.calls == []


def test_client_errors_are_not_retried(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [httpx.Response(400, json={"error": "invalid_request", "message": "bad"})]
    with client(service, sleeps) as c, pytest.raises(InvalidRequest):
        c.authorize("deploy.production")
    assert len(service.requests) == 1


def test_max_retries_zero_makes_one_attempt(service: ScriptedService, sleeps: Sleeps) -> None:
    service.script = [unavailable()]
    with client(service, sleeps, max_retries=0) as c, pytest.raises(ServiceUnavailable):
        c.authorize("deploy.production")
    assert len(service.requests) == 1


@pytest.mark.anyio
async def test_async_client_retries_with_the_same_key(
    service: ScriptedService, sleeps: Sleeps
) -> None:
    service.script = [rate_limited("2"), unavailable(), httpx.ConnectError("refused")]
    async with AsyncClient(
        BASE,
        "k",
        transport=httpx.MockTransport(service),
        sleep=sleeps.async_sleep,
        backoff=Backoff(jitter=lambda: 1.0),
    ) as c:
        receipt = await c.authorize("deploy.production", actor="release-bot")
    assert receipt.decision == "PERMIT"
    assert sleeps.calls == [2.0, 1.0, 2.0]
    assert len({b["idempotency_key"] for b in service.bodies}) == 1
