"""When to (re)fetch the key list: the state of the cache, without the I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from execauth_client.verify import KeyList

DEFAULT_TTL = 3600.0


@dataclass
class KeyCache:
    """Holds the key list for ``ttl`` seconds (default: the list's own ``cache_ttl``).

    An unknown ``key_id`` triggers a refresh (a rotation may have published a new key),
    at most once per ``min_refresh_interval`` so that receipts naming made-up keys cannot
    make us hammer the service.
    """

    ttl: float | None = None
    min_refresh_interval: float = 1.0
    clock: Callable[[], float] = field(default=lambda: 0.0)
    keys: KeyList | None = None
    fetched_at: float | None = None

    def effective_ttl(self) -> float:
        if self.ttl is not None:
            return self.ttl
        if self.keys is not None and self.keys.cache_ttl is not None:
            return float(self.keys.cache_ttl)
        return DEFAULT_TTL

    def fresh(self) -> KeyList | None:
        """The cached list if still within its TTL."""
        if self.keys is None or self.fetched_at is None:
            return None
        if self.clock() - self.fetched_at >= self.effective_ttl():
            return None
        return self.keys

    def may_refresh_for_unknown_key(self) -> bool:
        return (
            self.fetched_at is None or self.clock() - self.fetched_at >= self.min_refresh_interval
        )

    def store(self, keys: KeyList) -> KeyList:
        self.keys, self.fetched_at = keys, self.clock()
        return keys
