"""Approvals of ESCALATE decisions as the API and the console use them (docs/approvals.md).

The rules are ``execauth.approvals`` (pure); the locked transaction that applies them
is ``store.approvals``. This use case stands between those and the routes: it reads an
approval as of now (an expired one settled first), lists the pending and decided ones,
and casts a vote whose final receipt ``ExecutionService.issue_outcome`` signs.
"""

from __future__ import annotations

import anyio.to_thread

from execauth.store.approvals import Approval, Ballot
from execauth.usecases.execute import ExecutionService


class Approvals:
    def __init__(self, service: ExecutionService) -> None:
        self._service = service
        self._store = service.approvals

    async def get(self, org_id: str, approval_id: str) -> Approval:
        """The approval as of now; reading settles one whose deadline has passed."""
        return await self._service.approval(org_id, approval_id)

    async def pending(self, org_id: str, limit: int = 100) -> list[Approval]:
        """Up to ``limit`` approvals that were pending, each read as of now.

        Reading settles the expired ones, so a caller that shows pending approvals
        filters on ``state`` again; the length says whether the limit was reached.
        """
        ids = await anyio.to_thread.run_sync(self._store.pending, org_id, limit)
        return [await self.get(org_id, approval_id) for approval_id in ids]

    async def decided(self, org_id: str, limit: int = 20) -> list[Approval]:
        """The ``limit`` most recently decided approvals, newest first."""
        ids = await anyio.to_thread.run_sync(self._store.decided, org_id, limit)
        return [await self.get(org_id, approval_id) for approval_id in ids]

    async def vote(self, org_id: str, approval_id: str, ballot: Ballot) -> Approval:
        """Cast ``ballot``; the vote that makes the approval final issues its receipt."""
        return await anyio.to_thread.run_sync(
            self._store.vote,
            org_id,
            approval_id,
            ballot,
            self._service.clock(),
            self._service.issue_outcome,
        )
