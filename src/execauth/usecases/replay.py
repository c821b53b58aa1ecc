"""Replay use cases: re-run stored executions, and preview a draft policy's impact.

``policy.replay`` holds the pure logic; this module loads what it needs from the
stores, records each replay in the execution's lineage, and pages through
history in bounded batches so a large range cannot exhaust memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio.to_thread

from execauth.errors import ExecauthError, InternalError, InvalidRequest, NotFound
from execauth.pacing import Pacer
from execauth.policy.decision import PolicyRef
from execauth.policy.document import parse_policy_data, parse_policy_document
from execauth.policy.engine import CompiledPolicy, PolicySet, compile_policy
from execauth.policy.explain import explain
from execauth.policy.replay import (
    ImpactReport,
    RecordedExecution,
    impact,
    recorded_outcome,
    replay,
)
from execauth.store.executions import ExecutionFilters, ExecutionRecord
from execauth.usecases.execute import ExecutionService

PAGE = 500
MAX_RANGE_EXECUTIONS = 100_000  # a bigger range is refused, not silently truncated


@dataclass(frozen=True, slots=True)
class RangeReplay:
    replayed: int
    mismatches: list[dict[str, Any]]

    def view(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "matched": self.replayed - len(self.mismatches),
            "mismatches": self.mismatches,
        }


class ReplayService:
    def __init__(self, service: ExecutionService) -> None:
        self._service = service
        self._runtime = service.runtime

    async def replay_execution(self, org_id: str, execution_id: str, actor: str) -> dict[str, Any]:
        """Re-evaluate one execution under its own policy version and recorded ``now``."""
        executions = self._runtime.executions
        record = await anyio.to_thread.run_sync(executions.get, org_id, execution_id)
        if record is None:
            raise NotFound("no such execution in this organization")
        result = await anyio.to_thread.run_sync(self._replay_record, record)
        await anyio.to_thread.run_sync(
            executions.record_lineage,
            org_id,
            execution_id,
            "replay",
            self._service.clock(),
            {"actor": actor, "matches": result["matches"], "replayed": result["replayed"]},
        )
        return result

    async def replay_range(
        self, org_id: str, since: datetime | None, until: datetime | None
    ) -> RangeReplay:
        return await anyio.to_thread.run_sync(self._replay_range, org_id, since, until)

    async def impact(
        self,
        org_id: str,
        draft: str | dict[str, Any],
        policy_id: str,
        since: datetime | None,
        until: datetime | None,
    ) -> dict[str, Any]:
        """What would change if ``draft`` were published as the next ``policy_id``.

        ``draft`` is the document's YAML or JSON text, or the decoded JSON object, as
        publishing takes either; it is checked as publishing checks it. The answer's
        ``published_version`` is the version the draft would replace, ``None`` when no
        published policy has that id (so a report of no change is not mistaken for one).
        """
        if isinstance(draft, str):
            document = parse_policy_document(draft, policy_id=policy_id, source_name=policy_id)
        else:
            document = parse_policy_data(draft, policy_id=policy_id, source_name=policy_id)
        compiled = compile_policy(document, PolicyRef(policy_id, 0, document.policy_hash))
        report, replaced = await anyio.to_thread.run_sync(
            self._impact, org_id, compiled, since, until
        )
        return {
            "policy_id": policy_id,
            "draft_policy_hash": document.policy_hash,
            "published_version": replaced,
            **report.view(),
        }

    def explain(self, record: ExecutionRecord) -> tuple[dict[str, Any] | None, str | None]:
        """Why it was decided: ``policy eval --explain``'s trace, re-run as replay runs it.

        The recorded request, ``now`` and org facts under the very policy version that
        decided (``policy.explain`` shares its steps with the server's evaluation). A
        trace that cannot be built is said, not raised: (trace, None) or (None, why not).
        Blocking: call it from a worker thread.
        """
        recorded = recorded_execution(record)
        stored = self._runtime.control.get_policy(
            record.org_id, record.policy_id, record.policy_version
        )
        if stored is None:
            return None, f"policy {record.policy_id} v{record.policy_version} is not stored"
        try:
            compiled = self._service.policies.compiled(stored)
        except ExecauthError as exc:
            return None, exc.message
        policies = PolicySet([compiled])
        explanation = explain(policies, recorded.request, now=recorded.now, org=recorded.org)
        return explanation.as_dict(), None

    # --- blocking parts, run in a worker thread ------------------------------
    def _replay_record(self, record: ExecutionRecord) -> dict[str, Any]:
        execution = recorded_execution(record)
        policy = self._policy_version(record.org_id, record.policy_id, record.policy_version)
        before, after = recorded_outcome(execution), replay(policy, execution)
        return {
            "execution_id": record.execution_id,
            "policy_id": record.policy_id,
            "policy_version": record.policy_version,
            "recorded": before.view(),
            "replayed": after.view(),
            "matches": before == after,
        }

    def _replay_range(
        self, org_id: str, since: datetime | None, until: datetime | None
    ) -> RangeReplay:
        replayed, mismatches = 0, []
        for record in self._history(org_id, since, until):
            replayed += 1
            result = self._replay_record(record)
            if not result["matches"]:
                mismatches.append(result)
        return RangeReplay(replayed, mismatches)

    def _impact(
        self, org_id: str, draft: CompiledPolicy, since: datetime | None, until: datetime | None
    ) -> tuple[ImpactReport, int | None]:
        """The report, and the published version the draft replaces (``None``: none)."""
        latest = self._runtime.control.latest_policies(org_id)
        replaced = next((s.version for s in latest if s.policy_id == draft.ref.policy_id), None)
        active = [
            self._service.policies.compiled(stored)
            for stored in latest
            if stored.policy_id != draft.ref.policy_id
        ]
        policies = PolicySet([*active, draft])
        records = (recorded_execution(r) for r in self._history(org_id, since, until))
        return impact(policies, records), replaced

    def _policy_version(self, org_id: str, policy_id: str, version: int) -> CompiledPolicy:
        stored = self._runtime.control.get_policy(org_id, policy_id, version)
        if stored is None:
            # Versions are immutable and never deleted; a missing one is corruption.
            raise InternalError(f"policy {policy_id} v{version} of a stored execution is missing")
        return self._service.policies.compiled(stored)

    def _history(
        self, org_id: str, since: datetime | None, until: datetime | None
    ) -> Iterator[ExecutionRecord]:
        if since is not None and until is not None and since >= until:
            raise InvalidRequest("since must be before until")
        filters = ExecutionFilters(since=since, until=until)
        seen = 0
        pace = Pacer()  # this runs in a thread beside the event loop: share the GIL
        while True:
            page = self._runtime.executions.page(org_id, filters, limit=PAGE)
            for record in page:
                pace()
                if _is_approval_outcome(record):
                    continue  # decided by people, not by the policy: nothing to re-evaluate
                seen += 1
                if seen > MAX_RANGE_EXECUTIONS:
                    raise InvalidRequest(
                        f"more than {MAX_RANGE_EXECUTIONS} executions in range; narrow it"
                    )
                yield record
            if len(page) < PAGE:
                return
            last = page[-1]
            filters = ExecutionFilters(
                since=since, until=until, before=(last.decided_at_ms, last.execution_id)
            )


def _is_approval_outcome(record: ExecutionRecord) -> bool:
    """The PERMIT or DENY an approval issued (docs/approvals.md): it carries its
    ESCALATE's evaluation input, whose approval terms only an ESCALATE may have."""
    if record.decision == "ESCALATE" or '"approval"' not in record.evaluation_input:
        return False
    return "approval" in json.loads(record.evaluation_input)


def recorded_execution(record: ExecutionRecord) -> RecordedExecution:
    """A stored execution as replay (and the console's "why") re-evaluates it."""
    return RecordedExecution.from_stored(
        execution_id=record.execution_id,
        decision=record.decision,
        rule_id=record.rule_id,
        reason=record.reason,
        policy_id=record.policy_id,
        policy_version=record.policy_version,
        evaluation_input=record.evaluation_input,
    )
