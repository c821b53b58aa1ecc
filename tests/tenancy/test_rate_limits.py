"""Per-organization rate limits (docs/api.md): 429, Retry-After, RateLimit-*."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from execauth.config import Settings
from execauth.errors import RateLimited, ServiceUnavailable
from execauth.serving.runtime import Runtime
from execauth.tenancy.orgs import new_org_id
from execauth.tenancy.rate_limits import LocalWindows, OrgRateLimiter
from execauth.usecases.execute import rate_limiter_for
from tests.conftest import ADMIN, REDIS_URL, Tenant, make_tenant, small_plans

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
RATE_HEADERS = ("ratelimit-limit", "ratelimit-remaining", "ratelimit-reset")

pytestmark = pytest.mark.anyio
three_a_minute = pytest.mark.parametrize("plans", [small_plans(per_minute=3)], ids=["3/min"])


@pytest.fixture
def mid_minute(
    client: httpx.AsyncClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hold the app's in-memory rate window still, 30 s into a minute.

    On the real clock, requests that straddle a minute boundary are counted by the
    sliding window as the previous minute's weighted share, which lets one more
    through than a test of "the fourth is refused" expects.
    """
    assert settings.redis_url is None  # only the in-memory window reads this clock
    app = client._transport.app  # type: ignore[attr-defined]
    # The epoch's first minute, half-way through.
    pinned = rate_limiter_for(settings, clock=lambda: 30.0)
    monkeypatch.setattr(app.state.service, "rate_limiter", pinned)


async def execute(client: httpx.AsyncClient, tenant: Tenant, body: object) -> httpx.Response:
    return await client.post("/v1/execute", json=body, headers=tenant.auth)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (PERMIT, 200),
        ({"surface": ""}, 400),
        ({"surface": "pay.out"}, 404),
    ],
    ids=["decision", "invalid", "unknown-surface"],
)
async def test_every_counted_gateway_answer_carries_ratelimit_headers(
    client: httpx.AsyncClient, tenant: Tenant, body: object, status: int
) -> None:
    response = await execute(client, tenant, body)
    assert response.status_code == status
    assert all(name in response.headers for name in RATE_HEADERS)
    assert response.headers["ratelimit-limit"] == "5000"


async def test_remaining_counts_down_by_one_per_request(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    first = await execute(client, tenant, PERMIT)
    second = await execute(client, tenant, PERMIT)
    remaining = int(first.headers["ratelimit-remaining"])
    assert int(second.headers["ratelimit-remaining"]) == remaining - 1


@three_a_minute
@pytest.mark.usefixtures("mid_minute")
async def test_request_over_the_per_minute_limit_is_429_rate_limited(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for _ in range(3):
        assert (await execute(client, tenant, PERMIT)).status_code == 200
    response = await execute(client, tenant, PERMIT)
    assert response.status_code == 429
    assert response.json()["error"] == "rate_limited"
    assert "decision" not in response.json()
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert response.headers["ratelimit-remaining"] == "0"


@three_a_minute
@pytest.mark.usefixtures("mid_minute")
async def test_rate_limited_requests_are_not_evaluated_or_counted(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
) -> None:
    for _ in range(5):
        await execute(client, tenant, PERMIT)
    assert runtime.executions.count(tenant.org_id) == 3


@three_a_minute
@pytest.mark.usefixtures("mid_minute")
async def test_each_organization_has_its_own_limit(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    for _ in range(4):
        await execute(client, tenant, PERMIT)
    other = await make_tenant(client)
    assert (await execute(client, other, PERMIT)).status_code == 200


async def test_enterprise_plan_allows_bursts_of_10000_a_minute(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    await client.patch(
        f"/console/v1/orgs/{tenant.org_id}", json={"plan": "enterprise"}, headers=ADMIN
    )
    response = await execute(client, tenant, PERMIT)
    assert response.headers["ratelimit-limit"] == "10000"


async def test_unauthenticated_requests_are_refused_before_counting(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/v1/execute", json=PERMIT)
    assert response.status_code == 401
    assert "ratelimit-limit" not in response.headers


class TestUnreachableRedis:
    """A limiter that cannot answer fails the request closed: 503, never unlimited."""

    @pytest.fixture
    def redis_url(self) -> str:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def test_refused_redis_connection_is_503_service_unavailable(
        self, client: httpx.AsyncClient, tenant: Tenant, runtime: Runtime
    ) -> None:
        response = await execute(client, tenant, PERMIT)
        assert response.status_code == 503
        assert response.json()["error"] == "service_unavailable"
        assert runtime.executions.count(tenant.org_id) == 0

    async def test_the_instance_reports_not_ready(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/readyz")).status_code == 503


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers: a hung Redis."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"


async def test_hung_redis_is_503_within_the_timeout(silent_server: str) -> None:
    limiter = OrgRateLimiter(silent_server, timeout_seconds=0.2, prefix="t")
    try:
        with pytest.raises(ServiceUnavailable):
            await limiter.hit("org_a", 10)
    finally:
        limiter.close()


needs_redis = pytest.mark.skipif(
    not REDIS_URL, reason="Redis tests need EXECAUTH_TEST_REDIS_URL (set by .ci/run)"
)


async def test_each_of_n_worker_processes_without_redis_allows_an_nth_of_the_limit() -> None:
    # serve --workers 3 without Redis: three in-memory windows, never more than the plan.
    limiter = OrgRateLimiter(None, timeout_seconds=1, prefix="t", processes=3)
    org = new_org_id()
    states = [await limiter.hit(org, 10) for _ in range(3)]
    assert [s.remaining for s in states] == [2, 1, 0]
    assert states[0].limit == 3
    with pytest.raises(RateLimited):
        await limiter.hit(org, 10)


async def test_a_share_of_a_limit_is_never_zero() -> None:
    limiter = OrgRateLimiter(None, timeout_seconds=1, prefix="t", processes=4)
    org = new_org_id()
    await limiter.hit(org, 3)
    with pytest.raises(RateLimited):
        await limiter.hit(org, 3)


@needs_redis
async def test_workers_sharing_redis_enforce_the_whole_limit_together() -> None:
    assert REDIS_URL is not None
    limiter = OrgRateLimiter(REDIS_URL, timeout_seconds=2, prefix="execauth-test", processes=3)
    org = new_org_id()
    try:
        states = [await limiter.hit(org, 4) for _ in range(4)]
        assert states[-1].limit == 4
        assert states[-1].remaining == 0
        with pytest.raises(RateLimited):
            await limiter.hit(org, 4)
    finally:
        limiter.close()


@needs_redis
async def test_instances_sharing_redis_share_one_counter() -> None:
    assert REDIS_URL is not None
    first = OrgRateLimiter(REDIS_URL, timeout_seconds=2, prefix="execauth-test")
    second = OrgRateLimiter(REDIS_URL, timeout_seconds=2, prefix="execauth-test")
    org = new_org_id()
    try:
        await first.hit(org, 3)
        await second.hit(org, 3)
        assert (await first.hit(org, 3)).remaining == 0
        with pytest.raises(RateLimited):
            await second.hit(org, 3)
    finally:
        first.close()
        second.close()


class TestWithRedis:
    @pytest.fixture
    def redis_url(self) -> str:
        if not REDIS_URL:
            pytest.skip("Redis tests need EXECAUTH_TEST_REDIS_URL (set by .ci/run)")
        return REDIS_URL

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        # These tests count through Redis; a round trip over the 0.5 s default on a busy
        # CI machine answered 503 (rightly: fail closed) and failed the count once. The
        # timeout has tests of its own; here it gets the 2 s the other Redis tests use.
        return settings.model_copy(update={"rate_limit_timeout_seconds": 2.0})

    @three_a_minute
    async def test_gateway_limits_through_redis(
        self, client: httpx.AsyncClient, tenant: Tenant
    ) -> None:
        statuses = [(await execute(client, tenant, PERMIT)).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]

    async def test_the_instance_is_ready_with_redis_up(self, client: httpx.AsyncClient) -> None:
        assert (await client.get("/readyz")).status_code == 200


class RedisProxy:
    """A TCP relay in front of the real Redis that can be cut and restored: an outage."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Stop listening and drop every open connection, as a dead Redis host would."""
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._writers.update((writer, upstream_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


@needs_redis
async def test_redis_lost_after_startup_is_503_and_recovers_when_it_returns() -> None:
    assert REDIS_URL is not None
    target = urlsplit(REDIS_URL)
    proxy = RedisProxy((target.hostname or "127.0.0.1", target.port or 6379))
    await proxy.start()
    limiter = OrgRateLimiter(
        f"redis://127.0.0.1:{proxy.port}/0", timeout_seconds=0.5, prefix="execauth-test"
    )
    org = new_org_id()
    try:
        assert (await limiter.hit(org, 100)).allowed
        await proxy.cut()
        with pytest.raises(ServiceUnavailable):
            await limiter.hit(org, 100)
        assert not await limiter.healthy()
        await proxy.start()  # Redis is back, on the same address
        assert (await limiter.hit(org, 100)).allowed
    finally:
        limiter.close()
        await proxy.cut()


class SteppedClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


async def test_the_local_window_counts_as_the_limits_library_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The in-memory counter keeps the arithmetic of ``limits``' sliding window counter:
    the same requests at the same times get the same answers, remaining and reset."""
    import random

    from limits import RateLimitItemPerMinute
    from limits.aio.storage import MemoryStorage
    from limits.aio.strategies import SlidingWindowCounterRateLimiter

    clock = SteppedClock(1_795_000_000.0)
    monkeypatch.setattr("time.time", clock)  # what limits reads
    reference = SlidingWindowCounterRateLimiter(MemoryStorage())
    local = LocalWindows(clock=clock)
    draw = random.Random(7)
    limit = 10
    item = RateLimitItemPerMinute(limit)
    answers = 0
    for _ in range(600):
        clock.now += draw.choice([0.05, 0.05, 0.05, 0.05, 0.5, 2.0, 7.5, 31.0, 75.0])
        org = draw.choice(["a", "b"])
        allowed = await reference.hit(item, org)
        stats = await reference.get_window_stats(item, org)
        expected = (allowed, stats.remaining, round(stats.reset_time - clock.now, 3))
        got_allowed, remaining, reset_in = local.hit(org, limit)
        assert (got_allowed, remaining, round(reset_in, 3)) == expected
        answers += allowed
    assert 0 < answers < 600  # the sequence reached the limit and recovered


def test_the_local_window_refuses_past_the_limit_within_a_minute() -> None:
    clock = SteppedClock(1_795_000_020.0)
    local = LocalWindows(clock=clock)
    assert [local.hit("org", 3)[0] for _ in range(4)] == [True, True, True, False]
    clock.now += 120  # two minutes on: nothing of before counts
    assert local.hit("org", 3)[:2] == (True, 2)
