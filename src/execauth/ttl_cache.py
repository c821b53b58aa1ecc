"""A short-lived cache of database reads for the request path, loaded once per miss.

The gateway keeps API keys and policy sets for ``refresh_interval_seconds`` (1 s
by default, so that a revocation reaches every instance within a second). When
an entry expires under load, every request in flight misses at the same moment;
without coordination each would run its own read in the thread pool. Here the
first miss starts the read and the others await it ("single flight").

An entry is never served past its ttl. A load that was running when the cache
was invalidated still answers the requests that were waiting for it (they began
before the change), but its result is not kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import anyio.to_thread

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    def __init__(self, load: Callable[[K], V], *, ttl: float, max_entries: int = 10_000) -> None:
        self._load = load
        self._ttl = ttl
        self._max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}
        self._loading: dict[K, asyncio.Future[V]] = {}
        self._generation = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def invalidate(self, key: K | None = None) -> None:
        """Forget ``key`` (or everything); loads already running are not kept either."""
        self._generation += 1
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)

    async def get(self, key: K) -> V:
        entry = self._entries.get(key)
        if entry is not None and time.monotonic() - entry[0] < self._ttl:
            return entry[1]
        loading = self._loading.get(key)
        if loading is None:
            loop = asyncio.get_running_loop()
            loading = loop.create_future()
            self._loading[key] = loading
            # A task of its own, so that the request which happened to miss first
            # can be cancelled (client gone) without failing everyone waiting.
            task = loop.create_task(self._fill(key, loading))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # shield: one waiter being cancelled must not cancel the shared result.
        return await asyncio.shield(loading)

    async def _fill(self, key: K, loading: asyncio.Future[V]) -> None:
        generation = self._generation
        try:
            value = await anyio.to_thread.run_sync(self._load, key)
        except Exception as exc:  # noqa: BLE001 - re-raised to every waiter, never swallowed
            # Not cached: every waiter gets this error, and the next miss tries again.
            loading.set_exception(exc)
            loading.exception()  # marked retrieved: nobody waiting is not an error
            return
        except BaseException:
            loading.cancel()  # the load itself was cancelled (shutdown): so are its waiters
            raise
        finally:
            self._loading.pop(key, None)
        if generation == self._generation:
            if len(self._entries) >= self._max_entries:
                self._entries.clear()
            self._entries[key] = (time.monotonic(), value)
        loading.set_result(value)
