"""The expiry sweep: settles approvals whose deadline passed, even when nobody asks.

Expiry is otherwise settled lazily, by the first read, repeat or vote after the deadline
(docs/approvals.md). Without a sweep an approval nobody looks at again would never get
its final receipt, and subscribers would never hear ``execauth.approval.expired``
(docs/observability.md). Each pass walks the unsettled escalations (the partial index
``ix_executions_escalations``) from where the last pass stopped, at most ``batch`` of
them, and settles the expired ones through ``ApprovalStore.settle``: the same locked
transaction a vote takes, so of all the sweepers and voters of every instance that find
an approval expired, exactly one issues its receipt, and the others read it.

Runs in every serving process (a task of the app's lifespan, its database work on a
worker thread): a pass holds the write lock one approval at a time, so decisions wait
for at most one settlement, never for the whole pass. Failures are logged, and the next
pass tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio
import anyio.to_thread
import msgspec

from execauth.receipts import approval_id_for
from execauth.store.approvals import ApprovalStore, OutcomeIssuer
from execauth.wire_time import parse_timestamp

log = logging.getLogger("execauth.approvals")


@dataclass(frozen=True, slots=True)
class SweepResult:
    examined: int  # unsettled escalations looked at in this pass
    settled: int  # of those, found expired and now final (by this sweep or another)
    failed: int  # expired ones whose settlement failed; the next pass retries them


class ApprovalSweep:
    def __init__(
        self,
        store: ApprovalStore,
        issue: OutcomeIssuer,
        *,
        clock: Callable[[], datetime],
        batch: int = 100,
    ) -> None:
        self._store = store
        self._issue = issue
        self._clock = clock
        self._batch = batch
        # Where the next pass starts: (decided_at_ms, execution_id) of the last one seen.
        # Kept in memory only: a restarted process starts from the oldest again, which
        # costs one walk, not correctness.
        self._after: tuple[int, str] | None = None

    def run_once(self) -> SweepResult:
        """One bounded pass (blocking: call it on a worker thread)."""
        now = self._clock()
        candidates = self._store.unsettled_escalations(self._after, self._batch)
        # A short page means the walk reached the newest escalation: start over next time,
        # so an approval that was not yet expired when passed is looked at again.
        last = candidates[-1] if len(candidates) == self._batch else None
        self._after = (last.decided_at_ms, last.execution_id) if last is not None else None
        settled = failed = 0
        for candidate in candidates:
            try:
                receipt = msgspec.json.decode(candidate.receipt)
                expires_at = parse_timestamp(receipt["approval_expires_at"])
            except (KeyError, ValueError, msgspec.DecodeError):
                # Cannot be judged by time; left pending (never a PERMIT), and said so.
                log.warning(
                    "escalation %s has no readable approval_expires_at", candidate.execution_id
                )
                continue
            if now < expires_at:
                continue
            approval_id = approval_id_for(candidate.execution_id)
            try:
                approval = self._store.settle(candidate.org_id, approval_id, now, self._issue)
            except Exception:
                # A signing key unavailable, the database gone for a moment: the receipt
                # is not issued, the approval stays pending (never a PERMIT), retried later.
                log.exception("settling expired approval %s failed; retrying later", approval_id)
                failed += 1
                continue
            if approval.state != "pending":
                settled += 1
        if settled or failed:
            log.info("approval sweep: %d settled, %d failed", settled, failed)
        return SweepResult(len(candidates), settled, failed)


async def run_sweep(sweep: ApprovalSweep, interval_seconds: float) -> None:
    """Pass after pass, ``interval_seconds`` apart, until cancelled (the app's lifespan)."""
    while True:
        await anyio.sleep(interval_seconds)
        try:
            await anyio.to_thread.run_sync(sweep.run_once)
        except Exception:  # the database unreachable, say: the next pass tries again
            log.exception("an approval expiry sweep failed; retrying")
