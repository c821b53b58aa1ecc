"""Per-organization request rate limits: a sliding-window counter per org and minute.

O(1) state per org (a moving window would keep one entry per request, 10,000 per
enterprise org). Two stores with the same arithmetic, that of the ``limits``
library's sliding-window counter: with ``EXECAUTH_REDIS_URL`` every instance shares
one counter in Redis through ``limits``; without it each process counts in its own
memory (``LocalWindows``: a dict and a few float operations, no lock and no await,
since one event loop owns it). The N worker processes of one ``execauth serve
--workers N`` then each enforce an N-th of the limit (rounded down): never more than
the plan allows in total, at the price of refusing a little early when the
connections are spread unevenly. When Redis does not answer in time the caller gets
``ServiceUnavailable``: a broken limiter must never mean "unlimited".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import coredis
from limits import RateLimitItemPerMinute
from limits.aio.storage import Storage as AsyncStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter
from limits.storage import storage_from_string
from limits.util import WindowStats

from execauth.errors import RateLimited, ServiceUnavailable


@dataclass(frozen=True, slots=True)
class RateLimitState:
    """One org's window after a request was counted (or refused)."""

    limit: int
    remaining: int
    reset_seconds: int  # until at least one more request would be allowed
    allowed: bool

    def headers(self) -> dict[str, str]:
        """The ``RateLimit-*`` fields (draft-ietf-httpapi-ratelimit-headers)."""
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset_seconds),
        }


def storage_uri(redis_url: str | None) -> str:
    """``async+redis://…`` for a configured Redis, else per-process memory."""
    if redis_url is None:
        return "async+memory://"
    scheme, sep, rest = redis_url.partition("://")
    if not sep or scheme not in ("redis", "rediss", "redis+unix"):
        raise ValueError("EXECAUTH_REDIS_URL must be a redis:// or rediss:// URL")
    return f"async+{scheme}://{rest}"


WINDOW_SECONDS = 60


class LocalWindows:
    """The sliding-window counter of ``limits``, for one process's memory.

    Per org: the count of the current minute (minutes aligned to the epoch, as
    ``limits`` aligns them) and of the one before. A request is allowed when the
    previous minute's count, weighted by the share of it still inside the last 60
    seconds, plus the current count stays within the limit. Same results as
    ``limits``' memory storage (``tests/tenancy/test_rate_limits.py`` compares them),
    at a fraction of the cost: that storage takes an asyncio lock, a timer and two
    awaited calls per request (profiled at ~25 µs per request under load).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # org -> [minute index, count in that minute, count in the minute before]
        self._windows: dict[str, list[int]] = {}

    def hit(self, org_id: str, limit: int) -> tuple[bool, int, float]:
        """Count one request if allowed: (allowed, remaining, seconds until reset)."""
        now = self._clock()
        minute = int(now // WINDOW_SECONDS)
        window = self._windows.get(org_id)
        if window is None:
            window = self._windows[org_id] = [minute, 0, 0]
        elif window[0] != minute:
            # One minute on: the current count becomes the previous; more: both are gone.
            window[2] = window[1] if window[0] == minute - 1 else 0
            window[0], window[1] = minute, 0
        current, previous = window[1], window[2]
        into = now / WINDOW_SECONDS % 1  # how far into the current minute, 0..1
        previous_weight = (1 - into) if previous else 0.0
        weighted = previous * previous_weight + current
        allowed = math.floor(weighted) + 1 <= limit
        if allowed:
            current = window[1] = current + 1
            weighted += 1
        remaining = max(0, limit - math.floor(weighted))
        previous_reset = math.inf
        if previous:
            previous_reset = (previous_weight * WINDOW_SECONDS) % (WINDOW_SECONDS / previous)
        current_reset = ((1 - into) * WINDOW_SECONDS) % WINDOW_SECONDS if current else math.inf
        reset = min(previous_reset, current_reset)
        return allowed, remaining, 0.0 if reset == math.inf else reset


class OrgRateLimiter:
    def __init__(
        self,
        redis_url: str | None,
        *,
        timeout_seconds: float,
        prefix: str,
        processes: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        # Our own pool, so that shutdown can close its sockets and so that a dead
        # Redis costs a bounded connect, not the client's default wait.
        self._pool: coredis.ConnectionPool | None = None
        options: dict[str, Any] = {"key_prefix": prefix}
        if redis_url is not None:
            self._pool = coredis.ConnectionPool.from_url(
                redis_url, connect_timeout=timeout_seconds, stream_timeout=timeout_seconds
            )
            options["connection_pool"] = self._pool
        storage = storage_from_string(storage_uri(redis_url), **options)
        assert isinstance(storage, AsyncStorage)  # "async+" URIs always give one
        self._storage = storage
        self._limiter = SlidingWindowCounterRateLimiter(self._storage)
        self._timeout = timeout_seconds
        self._items: dict[int, RateLimitItemPerMinute] = {}
        # Processes that each keep their own in-memory window for the same orgs.
        self._share = processes if redis_url is None else 1
        # The clock drives the in-memory window only: Redis's windows are shared
        # with other instances, which read their own clocks.
        self._local = LocalWindows(clock) if redis_url is None else None

    async def hit(self, org_id: str, per_minute: int) -> RateLimitState:
        """Count one request; raise ``RateLimited`` when the org is over its limit."""
        per_minute = self.enforced_limit(per_minute)
        if self._local is not None:
            # Memory: synchronous, it cannot hang or fail on I/O.
            allowed, remaining, reset_in = self._local.hit(org_id, per_minute)
            return self._state(per_minute, remaining, reset_in, allowed)
        item = self._items.get(per_minute)
        if item is None:
            item = self._items.setdefault(per_minute, RateLimitItemPerMinute(per_minute))
        try:
            with anyio.fail_after(self._timeout):
                allowed, stats = await self._count(item, org_id)
        except Exception as exc:
            # Timeouts, refused connections, protocol errors: all fail closed.
            raise ServiceUnavailable("the rate limiter is unavailable; retry later") from exc
        return self._state(per_minute, stats.remaining, stats.reset_time - time.time(), allowed)

    @staticmethod
    def _state(per_minute: int, remaining: int, reset_in: float, allowed: bool) -> RateLimitState:
        reset = max(1, math.ceil(reset_in))
        state = RateLimitState(per_minute, remaining, reset, allowed)
        if not allowed:
            raise RateLimited(
                f"more than {per_minute} requests per minute for this organization",
                headers={**state.headers(), "Retry-After": str(reset)},
            )
        return state

    def enforced_limit(self, per_minute: int) -> int:
        """What this process allows of an org's per-minute limit (its share, at least 1)."""
        return max(1, per_minute // self._share) if self._share > 1 else per_minute

    async def _count(self, item: RateLimitItemPerMinute, org_id: str) -> tuple[bool, WindowStats]:
        allowed = await self._limiter.hit(item, org_id)
        return allowed, await self._limiter.get_window_stats(item, org_id)

    async def healthy(self) -> bool:
        """Whether the storage answers now (``/readyz``): a dead Redis means not ready."""
        try:
            with anyio.fail_after(self._timeout):
                return bool(await self._storage.check())
        except Exception:  # noqa: BLE001 - whatever the failure, the answer is "not ready"
            return False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.disconnect()
