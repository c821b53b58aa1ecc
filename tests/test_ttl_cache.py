"""The request path's cache: one load per miss, nothing served past its ttl."""

from __future__ import annotations

import asyncio
import threading

import pytest

from execauth.ttl_cache import TtlCache

pytestmark = pytest.mark.anyio


class SlowLoad:
    """Counts calls and holds each one until ``release`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.fail_with: Exception | None = None

    def __call__(self, key: str) -> str:
        self.calls += 1
        self.release.wait(5)
        if self.fail_with is not None:
            raise self.fail_with
        return f"{key}#{self.calls}"


async def test_concurrent_misses_share_one_load() -> None:
    load = SlowLoad()
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    waiters = [asyncio.ensure_future(cache.get("k")) for _ in range(20)]
    await asyncio.sleep(0.05)
    load.release.set()
    assert await asyncio.gather(*waiters) == ["k#1"] * 20
    assert load.calls == 1


async def test_a_fresh_entry_is_served_without_loading() -> None:
    load = SlowLoad()
    load.release.set()
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    assert await cache.get("k") == "k#1"
    assert await cache.get("k") == "k#1"
    assert load.calls == 1


async def test_an_expired_entry_is_loaded_again() -> None:
    load = SlowLoad()
    load.release.set()
    cache: TtlCache[str, str] = TtlCache(load, ttl=0)
    assert await cache.get("k") == "k#1"
    assert await cache.get("k") == "k#2"


async def test_invalidate_drops_the_entry() -> None:
    load = SlowLoad()
    load.release.set()
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    await cache.get("k")
    cache.invalidate("k")
    assert await cache.get("k") == "k#2"


async def test_a_load_running_during_invalidate_answers_its_waiters_but_is_not_kept() -> None:
    load = SlowLoad()
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    waiter = asyncio.ensure_future(cache.get("k"))
    await asyncio.sleep(0.05)
    cache.invalidate()
    load.release.set()
    assert await waiter == "k#1"
    assert await cache.get("k") == "k#2"


async def test_a_failed_load_reaches_every_waiter_and_is_not_cached() -> None:
    load = SlowLoad()
    load.fail_with = RuntimeError("database down")
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    waiters = [asyncio.ensure_future(cache.get("k")) for _ in range(3)]
    await asyncio.sleep(0.05)
    load.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    load.fail_with = None
    assert await cache.get("k") == "k#2"


async def test_cancelling_the_first_waiter_does_not_fail_the_others() -> None:
    load = SlowLoad()
    cache: TtlCache[str, str] = TtlCache(load, ttl=60)
    first = asyncio.ensure_future(cache.get("k"))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(cache.get("k"))
    await asyncio.sleep(0.01)
    first.cancel()
    load.release.set()
    assert await second == "k#1"
    assert load.calls == 1
