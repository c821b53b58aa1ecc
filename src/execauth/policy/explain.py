"""Explain a decision: which blocks were considered, what each check and rule gave, and why.

Pure, and built on ``engine.PolicySet.candidates``/``choose`` (what ``select`` uses) and
``engine.trace``, which shares its activation, rule checks and conclusion with the
server's ``evaluate`` and is held equal to it by a property test, so an explanation
cannot disagree with the decision the server would take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from execauth.policy.decision import Decision
from execauth.policy.engine import Candidate, PolicySet, RuleResult, Trace, choose, trace
from execauth.request import parse_execute_request

UNGOVERNED = "UNGOVERNED"  # no block governs the surface: the server answers 404


@dataclass(frozen=True, slots=True)
class BlockView:
    policy_id: str
    version: int
    index: int
    match: str
    matched: bool
    chosen: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy_id": self.policy_id,
            "version": self.version,
            "block": self.index,
            "match": self.match,
            "matched": self.matched,
            "chosen": self.chosen,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    surface: str
    blocks: tuple[BlockView, ...]
    trace: Trace | None  # None when no block governs the surface

    @property
    def decision(self) -> Decision | None:
        return None if self.trace is None else self.trace.decision

    @property
    def outcome(self) -> str:
        """PERMIT, DENY, SILENCE, ESCALATE, or UNGOVERNED."""
        return UNGOVERNED if self.trace is None else self.trace.decision.outcome.value

    @property
    def why(self) -> str:
        """The decision-table row (docs/policy-language.md, "Evaluation") behind the decision."""
        trace = self.trace
        if trace is None:
            return "no block of any policy matches the surface: 404 surface_not_found"
        matched = [r.rule.id for r in trace.rules if r.matched]
        if trace.rules and not trace.rules[-1].error and matched:
            return f"{trace.row}: {', '.join(matched)}"
        return trace.row

    def as_dict(self) -> dict[str, Any]:
        decision = self.decision
        answer: dict[str, Any] = {
            "surface": self.surface,
            "decision": self.outcome,
            "rule_id": decision.rule_id if decision else None,
            "reason": decision.reason if decision else None,
            "message": decision.message if decision else None,
            "ttl_seconds": decision.ttl_seconds if decision else None,
            "constraints": dict(decision.constraints)
            if decision and decision.constraints is not None
            else None,
            "single_use": decision.single_use if decision else False,
            "why": self.why,
            "blocks": [b.as_dict() for b in self.blocks],
        }
        if self.trace is not None:
            answer["require"] = [
                {"path": c.path, "present": c.present} for c in self.trace.requires
            ]
            answer["rules"] = [_rule_view(r) for r in self.trace.rules]
            evaluated = {r.rule.id for r in self.trace.rules}
            answer["not_evaluated"] = [
                r.id for r in self.trace.block.rules if r.id not in evaluated
            ]
        return answer


def explain(
    policies: PolicySet,
    request: Mapping[str, Any],
    *,
    now: datetime,
    org: Mapping[str, Any],
) -> Explanation:
    """Select and evaluate like the server does, keeping every step."""
    surface = str(request["surface"])
    candidates = policies.candidates(surface)
    winner = choose(candidates)
    blocks = tuple(_view(c, winner) for c in candidates)
    if winner is None:
        return Explanation(surface, blocks, None)
    return Explanation(surface, blocks, trace(winner.block, request, now=now, org=org))


def explain_body(
    policies: PolicySet, body: Any, *, now: datetime, org: Mapping[str, Any]
) -> Explanation:
    """``explain`` for an execute request body as a client sends it (``InvalidRequest`` if bad)."""
    request = parse_execute_request(body, None)
    return explain(policies, request.evaluation_input(), now=now, org=org)


def _view(candidate: Candidate, winner: Candidate | None) -> BlockView:
    chosen = candidate is winner
    pattern = candidate.block.pattern
    if not candidate.matched:
        why = "does not match the surface"
    elif chosen:
        why = (
            "exact match"
            if pattern.is_exact
            else f"most specific matching pattern ({pattern.literal_chars} literal characters)"
        )
    elif winner is not None and candidate.rank < winner.rank:
        why = f"matches, but {_name(winner)} is more specific"
    else:
        why = f"matches as specifically as {_name(winner)}, which comes first"
    return BlockView(
        candidate.policy.ref.policy_id,
        candidate.policy.ref.version,
        candidate.index,
        pattern.text,
        candidate.matched,
        chosen,
        why,
    )


def _name(candidate: Candidate | None) -> str:
    if candidate is None:
        return "?"
    return (
        f"{candidate.policy.ref.policy_id} block {candidate.index} ({candidate.block.pattern.text})"
    )


def _rule_view(result: RuleResult) -> dict[str, Any]:
    return {
        "id": result.rule.id,
        "effect": result.rule.effect,
        "condition": result.rule.source,
        "value": result.value,
        "error": result.error,
    }
