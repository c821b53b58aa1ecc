"""What this process recently decided for an idempotency key: the answer to a repeat.

A retrying client sends the same key with the same request again, often while the
first is still being decided. Without this, each repeat is authenticated, evaluated,
signed, framed to the writer and only then recognised by the insert: it cost as
much as a new decision. Here a repeat of a key this process committed is answered
with the stored receipt before any of that, and a repeat of a key still being
decided here waits for the first answer instead of deciding again
(docs/decisions.md, "Repeats answered from memory").

Only committed answers are kept: an entry is added once the writer confirmed the
record durable, or reported the key's prior execution. ESCALATE decisions are left
out (a repeat answers their approval's current state, which changes), and so is
anything that failed: the request it belongs to, and every repeat that waited for
it, then takes the full path. What this process never saw (another gateway's or
instance's keys, an evicted entry) takes the full path too, where the writer finds
the key; so a miss is never wrong, only slower.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from execauth.policy.decision import Outcome
from execauth.store.executions import PriorExecution

# About 1.5 KiB a receipt: a few MiB per process, seconds to minutes of keys at the
# rates one process serves, which is when retries come.
MAX_RECENT_DECISIONS = 4_096

_Key = tuple[str, str]  # (org, idempotency key)
_ESCALATE = Outcome.ESCALATE.value


class RecentDecisions:
    """A bounded map (org, idempotency key) → committed answer, and the keys in flight."""

    def __init__(self, max_entries: int = MAX_RECENT_DECISIONS) -> None:
        self._max_entries = max_entries
        # Ordered for the eviction of the oldest: a plain dict emptied from its front
        # scans the holes left by earlier deletions (3 µs an insert when full, against
        # 0.5 µs with ``popitem(last=False)``).
        self._decided: OrderedDict[_Key, PriorExecution] = OrderedDict()
        self._deciding: dict[_Key, asyncio.Future[PriorExecution | None]] = {}

    def __len__(self) -> int:
        return len(self._decided)

    async def known(self, org_id: str, key: str) -> PriorExecution | None:
        """The committed answer for ``key``, waiting for it if this process is deciding
        it now; ``None`` when unknown here, or when that decision failed."""
        decided = self._decided.get((org_id, key))
        if decided is not None:
            return decided
        deciding = self._deciding.get((org_id, key))
        if deciding is None:
            return None
        # Shielded: a waiter that gives up (its client went away) must not cancel the
        # answer every other waiter shares.
        return await asyncio.shield(deciding)

    @contextmanager
    def deciding(self, org_id: str, key: str) -> Iterator[_Slot]:
        """Mark ``key`` as being decided here until the block ends; ``slot.settle`` with
        its committed answer. Left unsettled (an error, a cancellation), the waiters
        get ``None`` and decide for themselves."""
        entry = (org_id, key)
        if entry in self._deciding:
            # Another request is deciding it: this one waited for a decision that
            # failed, and another waiter took over first. Decide, without announcing.
            yield _Slot(self, entry, None)
            return
        future: asyncio.Future[PriorExecution | None] = asyncio.get_running_loop().create_future()
        self._deciding[entry] = future
        try:
            yield _Slot(self, entry, future)
        finally:
            del self._deciding[entry]
            if not future.done():
                future.set_result(None)

    def remember(self, org_id: str, key: str, answer: PriorExecution) -> bool:
        """Keep a committed answer; ``False`` for an ESCALATE's, which is not kept (see
        the module's text)."""
        if answer.decision == _ESCALATE:
            return False
        entry = (org_id, key)
        if entry not in self._decided and len(self._decided) >= self._max_entries:
            self._decided.popitem(last=False)  # the oldest entry first: retries come soon
        self._decided[entry] = answer
        return True


class _Slot:
    def __init__(
        self,
        recent: RecentDecisions,
        entry: _Key,
        future: asyncio.Future[PriorExecution | None] | None,
    ) -> None:
        self._recent = recent
        self._entry = entry
        self._future = future

    def settle(self, answer: PriorExecution) -> None:
        """``answer`` is committed: keep it, and give it to the requests waiting for it."""
        kept = self._recent.remember(*self._entry, answer)
        if self._future is not None and not self._future.done():
            self._future.set_result(answer if kept else None)
