"""Compile a policy document's CEL once; evaluate requests against it.

Evaluation is a pure function of (compiled policy, normalized request, ``now``,
org facts): replay re-runs it and must reproduce decision, rule and reason
exactly (DESIGN.md §5). Every failure inside evaluation becomes SILENCE; nothing
here can turn an error into PERMIT. ``trace`` is the one implementation: ``evaluate``
returns its decision and ``policy.explain`` renders the rest, so the two never disagree.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import cel

from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy.cost import (
    MAX_EVALUATION_COST,
    MAX_EXPRESSION_LENGTH,
    ExpressionCost,
    InputSize,
    analyse,
    measure_input,
    publish_problems,
)
from execauth.policy.decision import (
    DEFAULT_PERMIT_TTL_SECONDS,
    Decision,
    Outcome,
    PolicyRef,
    Reason,
)
from execauth.policy.document import PolicyDocument, RuleSpec
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
    cost: ExpressionCost


@dataclass(frozen=True, slots=True)
class CompiledBlock:
    pattern: SurfacePattern
    require: tuple[tuple[str, ...], ...]
    rules: tuple[CompiledRule, ...]


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    ref: PolicyRef
    blocks: tuple[CompiledBlock, ...]


def compile_policy(
    document: PolicyDocument, ref: PolicyRef, *, publishing: bool = True
) -> CompiledPolicy:
    """Compile every expression; raise ``PolicyInvalid`` naming each rule that is refused.

    ``publishing=False`` (loading a version stored before a limit existed) skips the
    publish-time limits of ``policy.cost`` — size, nesting, time-zone calls — so an
    older version keeps working; the evaluation cost limit still bounds every rule (a
    rule whose cost cannot be bounded is SILENCE at every evaluation).
    """
    problems: list[PolicyProblem] = []
    blocks = []
    for block in document.blocks:
        rules = []
        for rule in block.rules:
            refuse = functools.partial(_refuse, problems, rule)
            if publishing and len(rule.condition) > MAX_EXPRESSION_LENGTH:
                # Checked before compiling: the compiler's own cost grows with the source.
                refuse(f"expression exceeds {MAX_EXPRESSION_LENGTH} characters")
                continue
            try:
                program = cel.compile(rule.condition)
            except (ValueError, RuntimeError) as exc:
                refuse(f"CEL does not compile: {exc}")
                continue
            unknown = [
                f for f in program.functions() if f[0].isalpha() and f not in ALLOWED_FUNCTIONS
            ]
            if unknown:
                refuse(f"unknown function(s) {', '.join(unknown)} (see docs/policy-language.md)")
                continue
            cost = analyse(rule.condition)
            if publishing and (limits := publish_problems(rule.condition, cost)):
                for reason in limits:
                    refuse(reason)
                continue
            rules.append(
                CompiledRule(
                    rule.id, rule.effect, rule.condition, program, rule.reason, rule.message,
                    rule.ttl_seconds, cost,
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


def _refuse(problems: list[PolicyProblem], rule: RuleSpec, reason: str) -> None:
    problems.append(PolicyProblem(rule.path, reason, rule_id=rule.id, line=rule.line))


@dataclass(frozen=True, slots=True)
class Candidate:
    """One block of the set, as ``PolicySet.select`` saw it for one surface."""

    policy: CompiledPolicy
    index: int  # the block's position in its document
    block: CompiledBlock
    matched: bool
    rank: tuple[int, int]  # (exact match, literal characters); higher is more specific


class PolicySet:
    """An organization's active policies; picks the block that governs a surface."""

    def __init__(self, policies: Iterable[CompiledPolicy]) -> None:
        self.policies = sorted(policies, key=lambda p: p.ref.policy_id)

    def candidates(self, surface: str) -> list[Candidate]:
        """Every block in selection order (policy_id, then document order), matched or not."""
        return [
            Candidate(
                policy,
                index,
                block,
                matched := block.pattern.matches(surface),
                (int(block.pattern.is_exact), block.pattern.literal_chars) if matched else (-1, -1),
            )
            for policy in self.policies
            for index, block in enumerate(policy.blocks)
        ]

    def select(self, surface: str) -> tuple[CompiledPolicy, CompiledBlock] | None:
        """The most specific matching block: exact beats pattern, then more literal text wins;
        ties go to the lowest policy_id, then document order (docs/policy-language.md)."""
        winner = choose(self.candidates(surface))
        return None if winner is None else (winner.policy, winner.block)


def choose(candidates: Iterable[Candidate]) -> Candidate | None:
    """The first matching candidate of the highest rank (candidates come in selection order)."""
    best: Candidate | None = None
    for candidate in candidates:
        if candidate.matched and (best is None or candidate.rank > best.rank):
            best = candidate
    return best


@dataclass(frozen=True, slots=True)
class RequireCheck:
    path: str
    present: bool


@dataclass(frozen=True, slots=True)
class RuleResult:
    """One rule's condition: ``value`` when it ran, else why not (``error`` or skipped)."""

    rule: CompiledRule
    value: bool | None
    error: str | None  # evaluation failed or refused (cost): the message of the SILENCE

    @property
    def matched(self) -> bool:
        return self.value is True


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything ``evaluate`` looked at, and the decision-table row it ended in.

    ``rules`` holds the rules that were considered, in order; rules after the first
    error were not run and are absent.
    """

    block: CompiledBlock
    decision: Decision
    requires: tuple[RequireCheck, ...]
    rules: tuple[RuleResult, ...]
    row: str  # which row of DESIGN.md §5's decision table applied
    input_size: InputSize | None  # None when no rule ran (a require path was missing)


def evaluate(
    block: CompiledBlock, request: Mapping[str, Any], *, now: datetime, org: Mapping[str, Any]
) -> Decision:
    """Decide one normalized request (``ExecuteRequest.evaluation_input()``) under ``block``."""
    return trace(block, request, now=now, org=org).decision


def trace(
    block: CompiledBlock, request: Mapping[str, Any], *, now: datetime, org: Mapping[str, Any]
) -> Trace:
    """Evaluate ``request`` under ``block``, recording each step (DESIGN.md §5)."""
    requires = tuple(RequireCheck(".".join(p), _present(request, p)) for p in block.require)
    missing = next((check for check in requires if not check.present), None)
    if missing is not None:
        decision = Decision(
            Outcome.SILENCE,
            None,
            Reason.MISSING_CONTEXT,
            f"required field {missing.path} is missing",
        )
        return Trace(block, decision, requires, (), "a require path is missing", None)
    try:
        activation = cel.Context({**request, "now": now, "org": dict(org)})
    except Exception as exc:  # noqa: BLE001 - any conversion failure is indeterminate, never PERMIT
        decision = Decision(
            Outcome.SILENCE, None, Reason.EVALUATION_ERROR, f"request cannot be evaluated: {exc}"
        )
        return Trace(block, decision, requires, (), "the request cannot be evaluated", None)

    # Measured once per request, for every rule's cost bound (the activation's variables).
    size = measure_input({**request, "org": org})
    results: list[RuleResult] = []
    for rule in block.rules:
        value = _run(rule, activation, size)
        if isinstance(value, str):
            results.append(RuleResult(rule, None, value))
            decision = Decision(Outcome.SILENCE, rule.id, Reason.EVALUATION_ERROR, value)
            return Trace(block, decision, requires, tuple(results), "a condition failed", size)
        results.append(RuleResult(rule, value, None))

    permits = [r.rule for r in results if r.matched and r.rule.effect == "permit"]
    denies = [r.rule for r in results if r.matched and r.rule.effect == "deny"]
    return Trace(
        block, _conclude(permits, denies), requires, tuple(results), _row(permits, denies), size
    )


def _run(rule: CompiledRule, activation: cel.Context, size: InputSize) -> bool | str:
    """The rule's boolean value, or the message of the SILENCE it causes."""
    if rule.cost.unreadable is not None:
        return f"rule {rule.id} cannot be bounded in cost: {rule.cost.unreadable}"
    if not rule.cost.within_limit(size):
        steps = rule.cost.steps(size)
        # Refused before it starts: the evaluator holds the GIL and cannot be interrupted.
        return (
            f"rule {rule.id} exceeds the evaluation cost limit: estimated {steps:,.0f} steps "
            f"> {MAX_EVALUATION_COST:,} for this request (its largest list or map has "
            f"{size.largest} elements, its longest string {size.chars} characters)"
        )
    try:
        result = rule.program.execute(activation)
    except Exception as exc:  # noqa: BLE001 - CEL raises KeyError, TypeError, RuntimeError…
        return f"rule {rule.id} could not be evaluated: {type(exc).__name__}: {exc}"
    if result is True or result is False:
        return bool(result)
    return f"rule {rule.id} returned {type(result).__name__}, not a boolean"


def _row(permits: list[CompiledRule], denies: list[CompiledRule]) -> str:
    if permits and denies:
        return "permit and deny rules match"
    if denies:
        return "only deny rules match"
    if permits:
        return "only permit rules match"
    return "no rule matches"


def _conclude(permits: list[CompiledRule], denies: list[CompiledRule]) -> Decision:
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
