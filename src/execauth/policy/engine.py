"""Compile a policy document's CEL once; evaluate requests against it.

Evaluation is a pure function of (compiled policy, normalized request, ``now``,
org facts): replay re-runs it and must reproduce decision, rule and reason
exactly (DESIGN.md §5). Every failure inside evaluation becomes SILENCE; nothing
here can turn an error into PERMIT.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import cel

from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy.decision import (
    DEFAULT_PERMIT_TTL_SECONDS,
    Decision,
    Outcome,
    PolicyRef,
    Reason,
)
from execauth.policy.document import PolicyDocument
from execauth.surfaces import SurfacePattern, compile_surface_pattern

# The CEL standard functions we document and test (docs/policy-language.md). A
# function outside this list would compile but fail at every evaluation, so
# publishing refuses it instead of letting it turn every request into SILENCE.
ALLOWED_FUNCTIONS = frozenset(
    {
        "size", "matches", "startsWith", "endsWith", "contains",
        "int", "uint", "double", "string", "bytes", "bool", "dyn", "type",
        "timestamp", "duration",
        "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek",
        "getHours", "getMinutes", "getSeconds", "getMilliseconds",
    }
)  # fmt: skip
VARIABLES = ("surface", "action", "actor", "context", "payload", "now", "org")


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    effect: str
    source: str
    program: cel.Program
    reason: str | None
    message: str | None
    ttl_seconds: int | None


@dataclass(frozen=True, slots=True)
class CompiledBlock:
    pattern: SurfacePattern
    require: tuple[tuple[str, ...], ...]
    rules: tuple[CompiledRule, ...]


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    ref: PolicyRef
    blocks: tuple[CompiledBlock, ...]


def compile_policy(document: PolicyDocument, ref: PolicyRef) -> CompiledPolicy:
    """Compile every expression; raise ``PolicyInvalid`` naming each rule that does not compile."""
    problems: list[PolicyProblem] = []
    blocks = []
    for block in document.blocks:
        rules = []
        for rule in block.rules:
            try:
                program = cel.compile(rule.condition)
            except (ValueError, RuntimeError) as exc:
                problems.append(
                    PolicyProblem(
                        rule.path, f"CEL does not compile: {exc}", rule_id=rule.id, line=rule.line
                    )
                )
                continue
            unknown = [
                f for f in program.functions() if f[0].isalpha() and f not in ALLOWED_FUNCTIONS
            ]
            if unknown:
                problems.append(
                    PolicyProblem(
                        rule.path,
                        f"unknown function(s) {', '.join(unknown)} (see docs/policy-language.md)",
                        rule_id=rule.id,
                        line=rule.line,
                    )
                )
                continue
            rules.append(
                CompiledRule(
                    rule.id, rule.effect, rule.condition, program, rule.reason, rule.message,
                    rule.ttl_seconds,
                )
            )  # fmt: skip
        blocks.append(
            CompiledBlock(
                compile_surface_pattern(block.match),
                tuple(tuple(path.split(".")) for path in block.require),
                tuple(rules),
            )
        )
    if problems:
        raise PolicyInvalid(problems)
    return CompiledPolicy(ref, tuple(blocks))


class PolicySet:
    """An organization's active policies; picks the block that governs a surface."""

    def __init__(self, policies: Iterable[CompiledPolicy]) -> None:
        self.policies = sorted(policies, key=lambda p: p.ref.policy_id)

    def select(self, surface: str) -> tuple[CompiledPolicy, CompiledBlock] | None:
        """The most specific matching block: exact beats pattern, then more literal text wins;
        ties go to the lowest policy_id, then document order (docs/policy-language.md)."""
        best: tuple[CompiledPolicy, CompiledBlock] | None = None
        best_rank = (-1, -1)
        for policy in self.policies:
            for block in policy.blocks:
                if not block.pattern.matches(surface):
                    continue
                rank = (int(block.pattern.is_exact), block.pattern.literal_chars)
                if rank > best_rank:
                    best, best_rank = (policy, block), rank
        return best


def evaluate(
    block: CompiledBlock, request: Mapping[str, Any], *, now: datetime, org: Mapping[str, Any]
) -> Decision:
    """Decide one normalized request (``ExecuteRequest.evaluation_input()``) under ``block``."""
    for path in block.require:
        if not _present(request, path):
            dotted = ".".join(path)
            return Decision(
                Outcome.SILENCE, None, Reason.MISSING_CONTEXT, f"required field {dotted} is missing"
            )
    try:
        activation = cel.Context({**request, "now": now, "org": dict(org)})
    except Exception as exc:  # noqa: BLE001 - any conversion failure is indeterminate, never PERMIT
        return Decision(
            Outcome.SILENCE, None, Reason.EVALUATION_ERROR, f"request cannot be evaluated: {exc}"
        )

    permits: list[CompiledRule] = []
    denies: list[CompiledRule] = []
    for rule in block.rules:
        try:
            result = rule.program.execute(activation)
        except Exception as exc:  # noqa: BLE001 - CEL raises KeyError, TypeError, RuntimeError…
            return Decision(
                Outcome.SILENCE,
                rule.id,
                Reason.EVALUATION_ERROR,
                f"rule {rule.id} could not be evaluated: {type(exc).__name__}: {exc}",
            )
        if result is True:
            (permits if rule.effect == "permit" else denies).append(rule)
        elif result is not False:
            return Decision(
                Outcome.SILENCE,
                rule.id,
                Reason.EVALUATION_ERROR,
                f"rule {rule.id} returned {type(result).__name__}, not a boolean",
            )

    if permits and denies:
        return Decision(
            Outcome.SILENCE,
            denies[0].id,
            Reason.CONFLICT,
            f"permit rule {permits[0].id} and deny rule {denies[0].id} both match",
        )
    if denies:
        rule = denies[0]
        return Decision(
            Outcome.DENY,
            rule.id,
            rule.reason or Reason.DENIED,
            rule.message or f"denied by rule {rule.id}",
        )
    if permits:
        ttl = min(r.ttl_seconds or DEFAULT_PERMIT_TTL_SECONDS for r in permits)
        return Decision(Outcome.PERMIT, permits[0].id, None, None, ttl)
    return Decision(Outcome.DENY, None, Reason.NO_MATCHING_RULE, "no rule permits this request")


def _present(request: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    value: Any = request
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) is None:
            return False
        value = value[key]
    return True
