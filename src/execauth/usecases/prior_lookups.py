"""What idempotency keys stand for in the store, read for many requests at once.

A request past a used-up quota is refused without a decision, unless its key was
decided before (``ExecutionService._stored_repeat``): only the store can tell. Read one
by one, each such request cost a trip to a thread and a query of its own, more than
the decision it saves (on PostgreSQL a round trip per request: docs/performance.md,
"The used-up quota round"). Here the keys asked for during one turn of the event loop
are read together: one trip to a thread, one query per organization
(``store.executions.prior_executions``, the writer's own lookup of a batch's keys).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import anyio.to_thread

from execauth.store.executions import PriorExecution

_Found = dict[tuple[str, str], PriorExecution]
# org → key → the requests waiting for what it stands for
_Waiting = dict[str, dict[str, list[asyncio.Future[PriorExecution | None]]]]
ReadPriors = Callable[[Mapping[str, list[str]]], _Found]


class PriorLookups:
    """``prior(org, key)``: the stored execution ``key`` stands for, or ``None``."""

    def __init__(self, read: ReadPriors) -> None:
        self._read = read  # ExecutionStore.by_idempotency_keys
        self._waiting: _Waiting = {}
        self._reads: set[asyncio.Task[None]] = set()

    async def prior(self, org_id: str, key: str) -> PriorExecution | None:
        loop = asyncio.get_running_loop()
        if not self._waiting:
            loop.call_soon(self._start_read)  # after every request of this turn has asked
        answer: asyncio.Future[PriorExecution | None] = loop.create_future()
        self._waiting.setdefault(org_id, {}).setdefault(key, []).append(answer)
        return await answer

    def _start_read(self) -> None:
        waiting, self._waiting = self._waiting, {}
        # A task of its own: a waiter that gives up must not cancel the others' read.
        task = asyncio.get_running_loop().create_task(self._read_for(waiting))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)

    async def _read_for(self, waiting: _Waiting) -> None:
        keys = {org_id: list(by_key) for org_id, by_key in waiting.items()}
        try:
            found = await anyio.to_thread.run_sync(self._read, keys)
        except Exception as exc:  # noqa: BLE001 - every waiter fails as its own read would
            for by_key in waiting.values():
                for answers in by_key.values():
                    for answer in answers:
                        if not answer.done():
                            answer.set_exception(exc)
            return
        for org_id, by_key in waiting.items():
            for key, answers in by_key.items():
                prior = found.get((org_id, key))
                for answer in answers:
                    if not answer.done():  # its request may have been cancelled
                        answer.set_result(prior)
