"""The receipt writer: group commit, no acknowledged receipt lost.

Requests hand their ``ExecutionRecord`` to ``write`` (or a ``Repeat`` a gateway
answered itself to ``count_repeat``) and wait; the writer takes everything
queued, stores it in one transaction and commits once (one fsync for the whole batch
under SQLite ``synchronous=FULL``), then wakes each waiter. Only after that does the
gateway send the receipt: an answered receipt is a kept one.

Where the commits run: on a thread of their own (``start``) in a process that also
serves requests, so that a commit never holds up the event loop; or on the event loop
itself (``start_on_loop``) in the writer process of ``serve --workers N``, whose loop
only carries frames: there a batch is what its loop read in one turn, and committing
it where it was read saves the hand-offs between two threads (two wake-ups and a GIL
transfer per batch; docs/performance.md, "The writer on its loop").

On PostgreSQL a batch of new records whose quotas have no limit (the self-hosted
default) is stored by one statement on a connection in autocommit: one round trip,
the commit included, instead of four (docs/performance.md, "The one-statement round").
Records whose idempotency keys turn out to be taken, and every other batch, go through
one transaction of several statements, the path SQLite always takes.

A failing batch is retried one record per transaction so that one bad row (an
id collision, say) fails only its own request. A request whose record could not
be committed gets ``ServiceUnavailable``: never a receipt.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from execauth.errors import ReceiptIdTaken, ServiceUnavailable
from execauth.store.database import WriterLock, begin_writing
from execauth.store.execution_writes import (
    QuotaExhausted,
    WriteOutcome,
    insert_batch,
    insert_execution,
    one_statement_batch,
    receipt_id_taken,
    store_in_one_statement,
)
from execauth.store.executions import ExecutionRecord, PriorExecution, Repeat, count_repeats
from execauth.tenancy.quota import QuotaCheck, UsedUpQuotas

log = logging.getLogger(__name__)

_STOP = object()


# What a committed (or failed) record's waiter is told, on its own event loop: the prior
# execution for a taken idempotency key (else None), or the error (QuotaExceeded,
# ServiceUnavailable). Never both.
Settle = Callable[[PriorExecution | None, BaseException | None], None]


@dataclass(slots=True)
class _Pending:
    record: ExecutionRecord | Repeat
    quota: QuotaCheck | None
    loop: asyncio.AbstractEventLoop
    settle: Settle


class ReceiptWriter:
    def __init__(
        self,
        engine: Engine,
        *,
        max_batch: int = 512,
        timeout_seconds: float = 10.0,
        on_commit: Callable[[int, float], None] | None = None,
    ) -> None:
        self.engine = engine
        self.on_commit = on_commit  # (batch size, seconds): for metrics
        self.max_batch = max_batch
        self.timeout_seconds = timeout_seconds
        self._lock = WriterLock.for_engine(engine)
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._connection: Connection | None = None
        # PostgreSQL: a second connection, in autocommit, for the batches one statement
        # stores (store_in_one_statement); SQLite has one write lock and no round trips to save.
        self._one_statement = engine.dialect.name == "postgresql"
        self._autocommit: Connection | None = None
        # Quotas a batch found used up: a batch that counts one of them skips the one
        # statement, which could only store nothing before the transaction refuses the
        # record. An entry never expires (a count only grows within a period); past the
        # memory's size the oldest is forgotten, at worst one wasted statement each.
        self._used_up = UsedUpQuotas(ttl=math.inf)
        # start_on_loop: the loop that commits, and what it read this turn.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._read: list[_Pending] = []

    @property
    def running(self) -> bool:
        if self._loop is not None:
            return not self._loop.is_closed()
        return self._thread is not None and self._thread.is_alive()

    def queued(self) -> int:
        """Receipts handed to ``write`` that no batch has taken yet (for metrics)."""
        return self._queue.qsize() + len(self._read)

    async def ready(self) -> bool:
        return self.running

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="execauth-writer", daemon=True)
        self._thread.start()

    def start_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Commit on ``loop``, at the end of each turn that read records (the writer
        process, whose loop does nothing else); ``submit`` is then called on it."""
        self._loop = loop

    def stop(self) -> None:
        """Commit everything queued so far, then end the thread (or leave the loop)."""
        if self._loop is not None:
            # Off the loop (it may be closed): waiters are answered through it, if it runs.
            self._loop = None
            while self._read:  # read but not committed: committed now
                self._commit(self._next_read_batch())
            self._close()
            return
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    async def write(
        self, record: ExecutionRecord, quota: QuotaCheck | None = None
    ) -> PriorExecution | None:
        """Durably store ``record``, counted against ``quota``.

        Returns the prior execution when the idempotency key is taken (not counted);
        raises ``QuotaExceeded`` when the quota is used up (nothing stored).
        """
        return await self._settled(record, quota)

    async def count_repeat(self, repeat: Repeat) -> None:
        """Durably count a repeat answered without a write (the gateway knew its receipt)."""
        await self._settled(repeat, None)

    async def _settled(
        self, item: ExecutionRecord | Repeat, quota: QuotaCheck | None
    ) -> PriorExecution | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PriorExecution | None] = loop.create_future()
        self.submit(item, quota, functools.partial(_settle_future, future), loop)
        # A timer on the future itself (asyncio.wait_for would add a wrapper future and
        # callbacks per request). A commit that lands after the deadline finds the future
        # done and answers nobody: the client already has its 503.
        deadline = loop.call_later(self.timeout_seconds, expire_unconfirmed, future)
        try:
            return await future
        finally:
            deadline.cancel()

    def submit(
        self,
        record: ExecutionRecord | Repeat,
        quota: QuotaCheck | None,
        settle: Settle,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Queue ``record`` (or a repeat to count); ``settle`` runs on ``loop`` once its
        batch committed or failed.

        ``write`` without a coroutine, a future or a timer per record: the writer process
        answers gateways' frames with it (``serving/remote_writer.py``), where the
        gateway keeps the deadline. Raises ``ServiceUnavailable`` when not running.
        """
        if not self.running:
            raise ServiceUnavailable("the receipt store is not accepting writes")
        if self._loop is not None:
            self._read.append(_Pending(record, quota, loop, settle))
            if len(self._read) == 1:  # the first of this turn: commit once the turn is done
                self._loop.call_soon(self._commit_read)
            return
        self._queue.put(_Pending(record, quota, loop, settle))

    # on the loop (start_on_loop) ----------------------------------------------
    def _commit_read(self) -> None:
        """Commit what the loop read (up to ``max_batch``; the rest in the next turn)."""
        loop = self._loop
        if loop is None or not self._read:  # stopped meanwhile: stop() committed them
            return
        batch = self._next_read_batch()
        if self._read:
            loop.call_soon(self._commit_read)
        self._commit(batch)

    def _next_read_batch(self) -> list[_Pending]:
        batch, self._read = self._read[: self.max_batch], self._read[self.max_batch :]
        return batch

    # on its own thread (start) ------------------------------------------------
    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch: list[_Pending] = []
            item = self._queue.get()
            while True:
                if item is _STOP:
                    stopping = True
                else:
                    assert isinstance(item, _Pending)
                    batch.append(item)
                if stopping or len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._commit(batch)
        self._close()

    def _close(self) -> None:
        for connection in (self._connection, self._autocommit):
            if connection is not None:
                connection.close()
        self._lock.close()

    def _commit(
        self, batch: list[_Pending], *, reconnected: bool = False, one_statement: bool = True
    ) -> None:
        """Store ``batch`` and answer its waiters. ``one_statement=False``: in a
        transaction, even where ``store_in_one_statement`` could take the batch."""
        try:
            stored = self._store_in_one_statement(batch) if one_statement else None
            results = self._insert(batch) if stored is None else []
        except Exception as exc:
            if not reconnected and isinstance(exc, DBAPIError) and exc.connection_invalidated:
                # The server dropped our idle connection (restart, failover, timeout): one
                # more try on a fresh connection rather than 503 from a database that is up.
                # Safe even if the lost connection had committed: the ids are unique.
                self._commit(batch, reconnected=True, one_statement=one_statement)
                return
            if len(batch) == 1:
                failed: ServiceUnavailable
                if receipt_id_taken(exc):
                    # Not a failure of the store: the gateway signs it again (errors.py).
                    failed = ReceiptIdTaken("another receipt has this receipt id")
                else:
                    log.exception("receipt write failed")
                    failed = ServiceUnavailable("the receipt could not be stored")
                _settle([(batch[0], None, failed)], self._loop)
                return
            for pending in batch:
                self._commit([pending], one_statement=one_statement)
            return
        if stored is not None:
            self._settle_stored(batch, stored)
            return
        outcomes: list[_Outcome] = []
        for pending, result in zip(batch, results, strict=True):
            if isinstance(result, QuotaExhausted):
                assert pending.quota is not None  # only a counted record is refused
                self._used_up.remember(pending.record.org_id, pending.quota)
                outcomes.append((pending, None, pending.quota.exceeded(_decided_at(pending))))
            else:
                outcomes.append((pending, result, None))
        _settle(outcomes, self._loop)

    def _store_in_one_statement(self, batch: list[_Pending]) -> set[str] | None:
        """The ids ``store_in_one_statement`` stored, committed; ``None`` when it cannot
        take the batch (SQLite, a key twice, a repeat to count, a missing counter row, a
        limit too near for the whole batch), having stored nothing."""
        if not self._one_statement:
            return None
        items: list[tuple[ExecutionRecord, QuotaCheck | None]] = []
        for pending in batch:
            if not isinstance(pending.record, ExecutionRecord):
                return None  # a repeat a gateway answered: counted in a transaction
            items.append((pending.record, pending.quota))
        if not one_statement_batch(items) or self._counts_a_full_quota(batch):
            return None
        if self._autocommit is None or self._autocommit.closed:
            self._autocommit = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        conn = self._autocommit
        started = time.perf_counter()
        try:
            with conn.begin():  # in autocommit: no BEGIN, the statement commits itself
                stored = store_in_one_statement(conn, items)
        except Exception:
            conn.close()
            self._autocommit = None
            raise
        if stored is not None and self.on_commit is not None:
            self.on_commit(len(batch), time.perf_counter() - started)
        return stored

    def _counts_a_full_quota(self, batch: list[_Pending]) -> bool:
        # Usually no quota is full: holds() then answers without building a key.
        return any(
            p.quota is not None and self._used_up.holds(p.record.org_id, p.quota) for p in batch
        )

    def _settle_stored(self, batch: list[_Pending], stored: set[str]) -> None:
        """Answer the records one statement stored (committed); those whose keys were
        taken go through a transaction, which finds their priors and counts repeats."""
        done: list[_Outcome] = []
        taken: list[_Pending] = []
        for pending in batch:
            assert isinstance(pending.record, ExecutionRecord)
            if pending.record.execution_id in stored:
                done.append((pending, None, None))
            else:
                taken.append(pending)
        _settle(done, self._loop)
        if taken:
            self._commit(taken, one_statement=False)

    def _insert(self, batch: list[_Pending]) -> list[WriteOutcome]:
        if self._connection is None or self._connection.closed:
            self._connection = self.engine.connect()
        conn = self._connection
        started = time.perf_counter()
        try:
            with self._lock.held(), conn.begin():
                begin_writing(conn)
                writes = [
                    (p.record, p.quota) for p in batch if isinstance(p.record, ExecutionRecord)
                ]
                if len(writes) == 1:
                    stored = [insert_execution(conn, *writes[0])]
                else:
                    stored = insert_batch(conn, writes) if writes else []
                # In batch order again; a repeat to count has nothing to store (None).
                outcomes = iter(stored)
                results = [
                    next(outcomes) if isinstance(p.record, ExecutionRecord) else None for p in batch
                ]
                repeats = _repeats(batch, results)
                if repeats:
                    count_repeats(conn, repeats)
        except Exception:
            # The connection may be broken (server gone, disk full): start afresh next time.
            conn.close()
            self._connection = None
            raise
        if self.on_commit is not None:
            self.on_commit(len(batch), time.perf_counter() - started)
        return results


def _repeats(batch: list[_Pending], results: list[WriteOutcome]) -> list[Repeat]:
    """The batch's idempotent repeats: those the insert found (same key, same request; a
    different request is a conflict, answered 409 and not counted) and those handed in."""
    repeats: list[Repeat] = []
    for pending, result in zip(batch, results, strict=True):
        record = pending.record
        if isinstance(record, Repeat):
            repeats.append(record)
        elif isinstance(result, PriorExecution) and result.request_digest == record.request_digest:
            repeats.append(Repeat(record.org_id, result.execution_id, _decided_at(pending)))
    return repeats


def _decided_at(pending: _Pending) -> datetime:
    record = pending.record
    assert isinstance(record, ExecutionRecord)
    return datetime.fromtimestamp(record.decided_at_ms / 1000, UTC)


def expire_unconfirmed(future: asyncio.Future[Any]) -> None:
    """A write's deadline (both writers): a 503, unless the commit was confirmed first."""
    if not future.done():
        future.set_exception(
            ServiceUnavailable("the receipt store did not confirm the write in time")
        )


_Outcome = tuple[_Pending, PriorExecution | None, BaseException | None]


def _settle(outcomes: list[_Outcome], here: asyncio.AbstractEventLoop | None) -> None:
    """Wake the waiters of a committed batch: one hand-off to each event loop, not one each.

    Every ``call_soon_threadsafe`` wakes its loop through a pipe, a system call and
    a context switch; a batch of 30 would pay that 30 times. ``here`` is the loop the
    commit ran on, if any (``start_on_loop``): its own waiters are answered at once.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    for loop, settled in by_loop.items():
        if loop is here:  # committed on the waiters' own loop (``here``): answer them now
            _resolve(settled)
            continue
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to answer
            loop.call_soon_threadsafe(_resolve, settled)


def _resolve(outcomes: list[_Outcome]) -> None:
    for pending, result, error in outcomes:
        try:
            pending.settle(result, error)
        except Exception:
            # One waiter's failure must not leave the rest of its batch unanswered.
            log.exception("answering a committed receipt's waiter failed")


def _settle_future(
    future: asyncio.Future[PriorExecution | None],
    result: PriorExecution | None,
    error: BaseException | None,
) -> None:
    if future.done():
        return  # past its deadline: the client already has its 503
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
