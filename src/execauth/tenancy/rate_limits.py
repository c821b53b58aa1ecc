"""Per-organization request rate limits over the ``limits`` library (DESIGN.md §3).

A sliding-window counter per organization and minute: O(1) state per org in
memory or Redis (a moving window would keep one entry per request, 10,000 per
enterprise org). Memory storage limits each instance on its own; with
``EXECAUTH_REDIS_URL`` every instance shares one counter. Without Redis, the N
worker processes of one ``execauth serve --workers N`` each enforce an N-th of
the limit (rounded down): never more than the plan allows in total, at the price
of refusing a little early when the connections are spread unevenly. When the storage does
not answer in time the caller gets ``ServiceUnavailable``: a broken limiter
must never mean "unlimited".
"""

from __future__ import annotations

import math
import time
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


class OrgRateLimiter:
    def __init__(
        self, redis_url: str | None, *, timeout_seconds: float, prefix: str, processes: int = 1
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

    async def hit(self, org_id: str, per_minute: int) -> RateLimitState:
        """Count one request; raise ``RateLimited`` when the org is over its limit."""
        per_minute = self.enforced_limit(per_minute)
        item = self._items.get(per_minute)
        if item is None:
            item = self._items.setdefault(per_minute, RateLimitItemPerMinute(per_minute))
        try:
            if self._pool is None:
                # Memory storage cannot hang; the deadline (about 10 µs of cancel-scope
                # bookkeeping per request) is for a networked store.
                allowed, stats = await self._count(item, org_id)
            else:
                with anyio.fail_after(self._timeout):
                    allowed, stats = await self._count(item, org_id)
        except Exception as exc:
            # Timeouts, refused connections, protocol errors: all fail closed.
            raise ServiceUnavailable("the rate limiter is unavailable; retry later") from exc
        reset = max(1, math.ceil(stats.reset_time - time.time()))
        state = RateLimitState(per_minute, stats.remaining, reset, allowed)
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
