"""Deterministic replay and impact analysis over recorded evaluations (docs/policy-language.md,
"Replay and impact analysis").

Evaluation is a pure function of (policy version, normalized request, ``now``,
org facts), and every execution stores all four; so re-running it must give
the same decision, rule and reason. A mismatch is a bug, never "drift". The
same machinery evaluates a *draft* policy against history, to show what
publishing it would change before anyone does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from execauth.policy.decision import Decision
from execauth.policy.engine import CompiledPolicy, PolicySet, evaluate
from execauth.wire_time import parse_timestamp

UNGOVERNED = "UNGOVERNED"  # no block matches the surface: the request would be 404
OUTCOMES = ("PERMIT", "DENY", "SILENCE", "ESCALATE", UNGOVERNED)
SAMPLES_PER_TRANSITION = 5


@dataclass(frozen=True, slots=True)
class RecordedExecution:
    """What was decided, and everything that went into deciding it."""

    execution_id: str
    decision: str
    rule_id: str | None
    reason: str | None
    policy_id: str
    policy_version: int
    request: Mapping[str, Any]
    now: datetime
    org: Mapping[str, Any]

    @classmethod
    def from_stored(
        cls,
        *,
        execution_id: str,
        decision: str,
        rule_id: str | None,
        reason: str | None,
        policy_id: str,
        policy_version: int,
        evaluation_input: str,
    ) -> RecordedExecution:
        stored = json.loads(evaluation_input)
        return cls(
            execution_id,
            decision,
            rule_id,
            reason,
            policy_id,
            policy_version,
            stored["request"],
            parse_timestamp(stored["now"]),
            stored["org"],
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    decision: str  # PERMIT, DENY, SILENCE, ESCALATE or UNGOVERNED
    rule_id: str | None
    reason: str | None

    @classmethod
    def of(cls, decision: Decision | None) -> Outcome:
        if decision is None:
            return cls(UNGOVERNED, None, None)
        return cls(decision.outcome.value, decision.rule_id, decision.reason)

    def view(self) -> dict[str, Any]:
        return {"decision": self.decision, "rule_id": self.rule_id, "reason": self.reason}


def recorded_outcome(execution: RecordedExecution) -> Outcome:
    return Outcome(execution.decision, execution.rule_id, execution.reason)


def reevaluate(policies: PolicySet, execution: RecordedExecution) -> Outcome:
    """Evaluate the recorded request under ``policies`` at the recorded ``now``."""
    selected = policies.select(str(execution.request["surface"]))
    if selected is None:
        return Outcome.of(None)
    _, block = selected
    return Outcome.of(evaluate(block, execution.request, now=execution.now, org=execution.org))


def replay(policy: CompiledPolicy, execution: RecordedExecution) -> Outcome:
    """Re-run one execution under the very policy version that decided it."""
    return reevaluate(PolicySet([policy]), execution)


@dataclass
class ImpactReport:
    """How decisions over a set of executions change from recorded to re-evaluated.

    ``changed`` counts decisions that change (PERMIT→DENY, …): what publishing would do
    to callers. A decision that stays the same but for another rule or reason is counted
    apart, in ``rule_changed``, with samples of its own.
    """

    evaluated: int = 0
    changed: int = 0
    matrix: Counter[tuple[str, str]] = field(default_factory=Counter)
    rule_changes: Counter[str] = field(default_factory=Counter)  # by (unchanged) decision
    samples: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    rule_samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, execution: RecordedExecution, after: Outcome) -> None:
        before = recorded_outcome(execution)
        self.evaluated += 1
        self.matrix[(before.decision, after.decision)] += 1
        if before == after:
            return
        if before.decision != after.decision:
            self.changed += 1
            cell = self.samples.setdefault((before.decision, after.decision), [])
        else:
            self.rule_changes[before.decision] += 1
            cell = self.rule_samples.setdefault(before.decision, [])
        if len(cell) < SAMPLES_PER_TRANSITION:
            cell.append(_sample(execution, before, after))

    def view(self) -> dict[str, Any]:
        present = [o for o in OUTCOMES if any(o in cell for cell in self.matrix)]
        return {
            "evaluated": self.evaluated,
            "changed": self.changed,
            "rule_changed": self.rule_changes.total(),
            "matrix": {
                before: {after: self.matrix[(before, after)] for after in present}
                for before in present
            },
            "transitions": [
                {
                    "from": before,
                    "to": after,
                    "count": self.matrix[(before, after)],
                    "samples": samples,
                }
                for (before, after), samples in sorted(self.samples.items())
            ],
            "rule_changes": [
                {"decision": decision, "count": self.rule_changes[decision], "samples": samples}
                for decision, samples in sorted(self.rule_samples.items())
            ],
        }


def _sample(execution: RecordedExecution, before: Outcome, after: Outcome) -> dict[str, Any]:
    return {
        "execution_id": execution.execution_id,
        "surface": execution.request.get("surface"),
        "before": before.view(),
        "after": after.view(),
    }


def impact(policies: PolicySet, executions: Iterable[RecordedExecution]) -> ImpactReport:
    """Re-evaluate ``executions`` under ``policies`` (e.g. with a draft in place)."""
    report = ImpactReport()
    for execution in executions:
        report.add(execution, reevaluate(policies, execution))
    return report
