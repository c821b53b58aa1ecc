"""Compile a policy document's CEL once; evaluate requests against it.

Evaluation is a pure function of (compiled policy, normalized request, ``now``,
org facts): replay re-runs it and must reproduce decision, rule and reason
exactly (docs/policy-language.md, "Evaluation"). Every failure inside evaluation
becomes SILENCE; nothing here can turn an error into PERMIT. ``trace`` records every
step for ``policy.explain``;
``evaluate``, on the request path, decides without recording: it shares with ``trace``
the require check, the CEL activation, the cost check, each rule's messages and the
conclusion, and hands any request that needs a rule's cost computed to ``trace``'s loop.
Agreement of the two is a property test (tests/policy/test_properties.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import cel

from execauth.canonical import CanonicalizationError, canonical_json
from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy.cel_ranges import INT_MIN, UINT_END
from execauth.policy.cel_syntax import parse
from execauth.policy.constraints import value_problem
from execauth.policy.cost import (
    MAX_EVALUATION_COST,
    MAX_EXPRESSION_LENGTH,
    ExpressionCost,
    InputSize,
    analyse,
    measure_input,
    publish_problems,
    size_bound,
)
from execauth.policy.decision import (
    DEFAULT_PERMIT_TTL_SECONDS,
    Decision,
    Escalation,
    Outcome,
    PolicyRef,
    Reason,
)
from execauth.policy.document import ConstraintSpec, PolicyDocument, RuleSpec
from execauth.policy.names import VARIABLES, closest, unknown_names
from execauth.policy.native import NativeCondition, native_condition
from execauth.policy.rule_index import RuleIndex
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
# The variables evaluation adds to the request's (names.VARIABLES holds all of them).
_BESIDE_REQUEST = frozenset({"now", "org"})


@dataclass(frozen=True, slots=True)
class CompiledConstraint:
    """A rule's constraint: a literal ``value``, or a ``program`` run on the request."""

    name: str
    value: Any
    source: str | None  # the CEL source when computed
    program: cel.Program | None
    cost: ExpressionCost | None


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
    escalation: Escalation | None = None
    constraints: tuple[CompiledConstraint, ...] = ()
    single_use: bool = False
    # The condition decided in Python where CEL would certainly agree (``policy.native``);
    # None when some part of it is left to CEL.
    native: NativeCondition | None = field(default=None, compare=False)
    # The decision this rule makes when it decides alone (``_conclude``): the same for
    # every request, so built once (a frozen Decision costs about 1-2 µs to build).
    alone: Decision = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "alone", _alone(self))

    def programs(self) -> Iterable[tuple[cel.Program, ExpressionCost]]:
        """The condition's program and every computed constraint's, with their costs."""
        yield self.program, self.cost
        for constraint in self.constraints:
            if constraint.program is not None and constraint.cost is not None:
                yield constraint.program, constraint.cost


@dataclass(frozen=True, slots=True)
class CompiledBlock:
    pattern: SurfacePattern
    require: tuple[tuple[str, ...], ...]
    rules: tuple[CompiledRule, ...]
    # What evaluation needs that no request changes, derived once (``__post_init__``):
    require_paths: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False, compare=False)
    unused_variables: frozenset[str] = field(init=False, compare=False)  # read by no rule
    unused_beside_request: frozenset[str] = field(init=False, compare=False)  # now, org
    free_up_to: float = field(init=False, compare=False)  # the least ExpressionCost.free_up_to
    index: RuleIndex[CompiledRule] = field(init=False, compare=False)  # rules a request skips
    # Every condition native and no constraint computed: ``evaluate`` may decide without
    # converting the request to CEL (``_decide_natively``).
    native: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # A computed constraint reads the request and costs steps like a condition.
        programs = [pair for rule in self.rules for pair in rule.programs()]
        used = {name for program, _ in programs for name in program.variables()}
        free = min((cost.free_up_to() for _, cost in programs), default=math.inf)
        # A frozen dataclass sets its derived fields through object.__setattr__.
        object.__setattr__(self, "require_paths", tuple((".".join(p), p) for p in self.require))
        object.__setattr__(self, "unused_variables", frozenset(VARIABLES) - used)
        object.__setattr__(self, "unused_beside_request", self.unused_variables & _BESIDE_REQUEST)
        object.__setattr__(self, "free_up_to", free)
        object.__setattr__(self, "index", RuleIndex(self.rules, [r.source for r in self.rules]))
        object.__setattr__(
            self,
            "native",
            all(
                rule.native is not None and all(c.program is None for c in rule.constraints)
                for rule in self.rules
            ),
        )


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
                named = ", ".join(_with_suggestion(f) for f in unknown)
                refuse(f"unknown function(s) {named} (see docs/policy-language.md)")
                continue
            # Variables resolve only when a rule runs: an undefined one would make every
            # request SILENCE. Stored versions keep loading (publishing=False).
            if publishing and (names := unknown_names(rule.condition)):
                refuse(
                    f"unknown name(s) {', '.join(map(str, names))}: a condition reads only "
                    f"{', '.join(VARIABLES)} (see docs/policy-language.md)"
                )
                continue
            cost = analyse(rule.condition)
            if publishing and (limits := publish_problems(rule.condition, cost)):
                for reason in limits:
                    refuse(reason)
                continue
            constraints = [
                c
                for spec in rule.constraints
                if (c := _compile_constraint(spec, rule, problems, publishing)) is not None
            ]
            if len(constraints) != len(rule.constraints):
                continue
            rules.append(
                CompiledRule(
                    rule.id, rule.effect, rule.condition, program, rule.reason, rule.message,
                    rule.ttl_seconds, cost, rule.escalation, tuple(constraints), rule.single_use,
                    native_condition(rule.condition),
                )
            )  # fmt: skip
        blocks.append(
            CompiledBlock(
                compile_surface_pattern(block.match),
                tuple(tuple(path.split(".")) for path in block.require),
                tuple(rules),
            )
        )
    # The trees served this document's three readings (names, cost, rule index); kept,
    # thousands of them would be walked by every full garbage collection of the process.
    parse.cache_clear()
    if problems:
        raise PolicyInvalid(problems)
    return CompiledPolicy(ref, tuple(blocks))


def _compile_constraint(
    spec: ConstraintSpec, rule: RuleSpec, problems: list[PolicyProblem], publishing: bool
) -> CompiledConstraint | None:
    """A literal as it is; a ``{cel: ...}`` under the same publish checks as a condition."""
    source = spec.expression
    if source is None:
        return CompiledConstraint(spec.name, spec.value, None, None, None)

    def refuse(reason: str) -> None:
        problems.append(
            PolicyProblem(
                spec.path, f"constraint {spec.name}: {reason}", rule_id=rule.id, line=spec.line
            )
        )

    if publishing and len(source) > MAX_EXPRESSION_LENGTH:
        refuse(f"expression exceeds {MAX_EXPRESSION_LENGTH} characters")
        return None
    try:
        program = cel.compile(source)
    except (ValueError, RuntimeError) as exc:
        refuse(f"CEL does not compile: {exc}")
        return None
    unknown = [f for f in program.functions() if f[0].isalpha() and f not in ALLOWED_FUNCTIONS]
    if unknown:
        named = ", ".join(_with_suggestion(f) for f in unknown)
        refuse(f"unknown function(s) {named} (see docs/policy-language.md)")
        return None
    if publishing and (names := unknown_names(source)):
        refuse(
            f"unknown name(s) {', '.join(map(str, names))}: an expression reads only "
            f"{', '.join(VARIABLES)} (see docs/policy-language.md)"
        )
        return None
    cost = analyse(source)
    if publishing and (limits := publish_problems(source, cost)):
        for reason in limits:
            refuse(reason)
        return None
    return CompiledConstraint(spec.name, None, source, program, cost)


def _with_suggestion(function: str) -> str:
    suggestion = closest(function, sorted(ALLOWED_FUNCTIONS))
    return f"{function} (did you mean {suggestion!r}?)" if suggestion else function


def _refuse(problems: list[PolicyProblem], rule: RuleSpec, reason: str) -> None:
    problems.append(PolicyProblem(rule.path, reason, rule_id=rule.id, line=rule.line))


MAX_KEPT_SELECTIONS = 1_024


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
        # ``select`` is a function of this set and the surface alone, and a set answers
        # thousands of requests over a few surfaces: each surface's choice is kept, up to
        # ``MAX_KEPT_SELECTIONS`` (surfaces are the clients' to choose), then forgotten.
        self._selections: dict[str, tuple[CompiledPolicy, CompiledBlock] | None] = {}

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
        selections = self._selections
        try:
            return selections[surface]  # one lookup: another thread may clear it meanwhile
        except KeyError:
            pass
        winner = choose(self.candidates(surface))
        selected = None if winner is None else (winner.policy, winner.block)
        if len(selections) >= MAX_KEPT_SELECTIONS:
            selections.clear()
        selections[surface] = selected
        return selected


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
    """Everything an evaluation looks at, and the decision-table row it ends in.

    ``rules`` holds the rules that were considered, in order; rules after the first
    error were not run and are absent.
    """

    block: CompiledBlock
    decision: Decision
    requires: tuple[RequireCheck, ...]
    rules: tuple[RuleResult, ...]
    row: str  # which row of the decision table applied (docs/policy-language.md)
    input_size: InputSize | None  # None when no rule ran (a require path was missing)


def evaluate(
    block: CompiledBlock,
    request: Mapping[str, Any],
    *,
    now: datetime,
    org: Mapping[str, Any],
    request_converts: bool = False,
) -> Decision:
    """Decide one normalized request (``ExecuteRequest.evaluation_input()``) under ``block``.

    ``trace(...).decision``, without recording the steps. A request small enough that no
    rule's cost bound can exceed the limit (``CompiledBlock.free_up_to``; its JSON form's
    length, ``cost.size_bound``, says so for most requests without measuring) runs the rules
    directly, less those its values certainly make false (``policy.rule_index``: each is
    false without an error, so skipping it changes nothing); any other is handed to
    ``trace``'s loop, which checks each rule's bound and runs every rule.

    ``request_converts``: the caller knows that every value of ``request`` converts to
    CEL (``ExecuteRequest.plain``), so the request's variables no rule reads are left
    out of the activation without a walk through them to make sure (``_activation``).
    The decision is the same either way.

    A block whose conditions are all native (``policy.native``) is decided without
    converting the request to CEL at all, unless some rule leaves it to CEL
    (``_decide_natively``).
    """
    for path, keys in block.require_paths:
        if not _present(request, keys):
            return _missing(path)
    # Most requests need no measuring: their JSON length shows them within every rule's
    # cost limit (policy.cost); the others are measured once the activation stands.
    free = block.free_up_to == math.inf or (
        (bound := size_bound({**request, "org": org})) is not None and bound <= block.free_up_to
    )
    if free and block.native:
        decided = _decide_natively(block, request, now, org, request_converts)
        if decided is not None:
            return decided
    activation = _activation(block, request, now, org, request_converts)
    if isinstance(activation, str):
        return Decision(Outcome.SILENCE, None, Reason.EVALUATION_ERROR, activation)
    if not free:
        size = measure_input({**request, "org": org})
        if max(size.total, size.chars) > block.free_up_to:
            return _run_rules(block, (), activation, size).decision
    matched: list[CompiledRule] = []
    for rule in _candidate_rules(block, request, org):
        try:
            value = rule.program.execute(activation)
        except Exception as exc:  # noqa: BLE001 - as in _run: any failure is SILENCE
            return _failed(rule, _raised(rule, exc))
        if value is True:
            matched.append(rule)
        elif value is not False:
            return _failed(rule, _not_boolean(rule, value))
    return _decided(matched, activation)


def _candidate_rules(
    block: CompiledBlock, request: Mapping[str, Any], org: Mapping[str, Any]
) -> tuple[CompiledRule, ...]:
    """The block's rules, less those the request's values certainly make false
    (``policy.rule_index``: skipping one changes nothing)."""
    if block.index.paths and (excluded := block.index.excluded(request, org)):
        return block.index.runnable(excluded)
    return block.rules


def _decided(matched: list[CompiledRule], activation: cel.Context | None) -> Decision:
    """The decision table over the rules that matched, with the grant they bind."""
    if not matched:
        return _NO_RULE_PERMITS
    permits: list[CompiledRule] = []
    denies: list[CompiledRule] = []
    escalates: list[CompiledRule] = []
    for rule in matched:
        if rule.effect == "permit":
            permits.append(rule)
        elif rule.effect == "deny":
            denies.append(rule)
        elif rule.effect == "escalate":
            escalates.append(rule)
    return _bind(_conclude(permits, denies, escalates), permits, escalates, activation, None)


def _decide_natively(
    block: CompiledBlock,
    request: Mapping[str, Any],
    now: datetime,
    org: Mapping[str, Any],
    request_converts: bool,
) -> Decision | None:
    """``evaluate``'s decision from the rules' native conditions (``policy.native``), for
    a request already found within every rule's cost limit; or None when CEL has to
    decide: a rule left undecided, a value CEL might not hold (the activation would then
    fail, and the request be SILENCE; the request's own values are walked to make sure
    unless the caller knows they convert). The rules are the same ones in the same
    order, through the same decision table, so the decision is the one CEL's run would
    make; the property tests hold the two together (tests/policy/test_native.py).
    """
    facts = dict(org)
    if not (_converts(now) and _converts(facts)):
        return None
    if not request_converts and not _converts(request):
        return None
    variables = {**request, "now": now, "org": facts}
    matched: list[CompiledRule] = []
    for rule in _candidate_rules(block, request, org):
        native = rule.native
        if native is None:  # CompiledBlock.native says no rule is; checked, not assumed
            return None
        try:
            value = native(variables)
        except Exception:  # noqa: BLE001 - a fault of ours: CEL decides instead, never PERMIT
            return None
        if value is None:
            return None
        if value:
            matched.append(rule)
    return _decided(matched, None)


def trace(
    block: CompiledBlock, request: Mapping[str, Any], *, now: datetime, org: Mapping[str, Any]
) -> Trace:
    """Evaluate ``request`` under ``block``, recording each step."""
    requires = tuple(
        RequireCheck(path, _present(request, keys)) for path, keys in block.require_paths
    )
    missing = next((check for check in requires if not check.present), None)
    if missing is not None:
        return Trace(block, _missing(missing.path), requires, (), "a require path is missing", None)
    activation = _activation(block, request, now, org)
    if isinstance(activation, str):
        decision = Decision(Outcome.SILENCE, None, Reason.EVALUATION_ERROR, activation)
        return Trace(block, decision, requires, (), "the request cannot be evaluated", None)
    # Measured once per request, for every rule's cost bound (the activation's variables).
    return _run_rules(block, requires, activation, measure_input({**request, "org": org}))


def _run_rules(
    block: CompiledBlock,
    requires: tuple[RequireCheck, ...],
    activation: cel.Context,
    size: InputSize,
) -> Trace:
    """Run the rules in order, each checked against the cost limit, until one fails."""
    results: list[RuleResult] = []
    for rule in block.rules:
        value = _run(rule, activation, size)
        if isinstance(value, str):
            results.append(RuleResult(rule, None, value))
            return Trace(
                block, _failed(rule, value), requires, tuple(results), "a condition failed", size
            )
        results.append(RuleResult(rule, value, None))

    permits = [r.rule for r in results if r.matched and r.rule.effect == "permit"]
    denies = [r.rule for r in results if r.matched and r.rule.effect == "deny"]
    escalates = [r.rule for r in results if r.matched and r.rule.effect == "escalate"]
    concluded = _conclude(permits, denies, escalates)
    decision = _bind(concluded, permits, escalates, activation, size)
    row = _row(permits, denies, escalates)
    if decision is not concluded and decision.outcome is Outcome.SILENCE:
        row = "a constraint could not be bound"
    return Trace(block, decision, requires, tuple(results), row, size)


def _activation(
    block: CompiledBlock,
    request: Mapping[str, Any],
    now: datetime,
    org: Mapping[str, Any],
    request_converts: bool = False,
) -> cel.Context | str:
    """The CEL variables of one evaluation, or why the request cannot be evaluated.

    Converting a value to CEL is the largest fixed cost of an evaluation (about 2 µs a
    string), so the variables no rule of the block reads are left out; but only when they
    certainly convert (``_converts``), so that a request with a value CEL cannot hold
    fails whole, naming the same variable, as it does when every variable is converted.
    When the caller knows the request's values convert (``request_converts``), only
    ``now`` and ``org`` are looked at: walking an unread payload cost a gateway's decision
    up to about 10 µs in process (docs/performance.md, "The unread-variables round").
    """
    try:
        variables = {**request, "now": now, "org": dict(org)}
        unused = block.unused_variables
        checked = block.unused_beside_request if request_converts else unused
        if unused and all(_converts(variables.get(name)) for name in checked):
            for name in unused:
                variables.pop(name, None)
        return cel.Context(variables)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is indeterminate, never PERMIT
        return f"request cannot be evaluated: {exc}"


_MAX_CHECKED_DEPTH = 16  # deeper values are converted rather than checked


def _converts(value: Any, depth: int = 0) -> bool:
    """Whether ``cel.Context`` certainly converts ``value`` (False: it may not).

    The conversions of the ``cel`` package (0.10, ``RustyPyType::try_into_value``) for
    the values a normalized request holds and for ``now``; anything else may not convert.
    A container's items go through one loop (``_all_convert``), a string checked without a
    call, and no ``all`` over a generator: the walk runs on every request a library caller
    evaluates, and this form takes it from about 9 to 3 µs for a typical request
    (docs/performance.md, "The fixed-cost round").
    """
    kind = type(value)
    if kind is str:
        return value.isascii() or _encodes(value)
    if kind is dict or kind is list or kind is tuple:
        if depth >= _MAX_CHECKED_DEPTH:
            return False
        if kind is not dict:
            return _all_convert(value, depth + 1)
        for key in value:  # an ASCII string, as nearly every key is, without a call
            if not (type(key) is str and key.isascii()) and not _converts_key(key):
                return False
        return _all_convert(value.values(), depth + 1)
    if value is None or kind is bool or kind is float or kind is bytes:
        return True
    if kind is int:
        return bool(INT_MIN <= value < UINT_END)
    if kind is datetime:
        return value.tzinfo is UTC  # a naive one is read in local time, which can be ambiguous
    return False


def _all_convert(items: Iterable[Any], depth: int) -> bool:
    """``_converts`` of each of a container's items; a string, the commonest item, is
    checked here without a call."""
    for item in items:
        if type(item) is str:
            if not (item.isascii() or _encodes(item)):
                return False
        elif not _converts(item, depth):
            return False
    return True


def _converts_key(key: Any) -> bool:
    """A map key CEL takes: an int (i64 or u64), a bool or a string."""
    kind = type(key)
    if kind is str:
        return key.isascii() or _encodes(key)
    return kind is bool or (kind is int and INT_MIN <= key < UINT_END)


def _encodes(text: str) -> bool:
    """CEL strings are UTF-8: a lone surrogate (``json.loads`` accepts ``"\\ud800"``) fails."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


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
        return _raised(rule, exc)
    if result is True or result is False:
        return bool(result)
    return _not_boolean(rule, result)


class _Unbound(Exception):
    """A constraint whose value cannot be computed or is not a valid value: SILENCE."""


def _bind(
    decision: Decision,
    permits: list[CompiledRule],
    escalates: list[CompiledRule],
    activation: cel.Context | None,
    size: InputSize | None,
) -> Decision:
    """``decision`` with the bound grant of the rules behind it (docs/policy-language.md,
    "Constraints"): every matching permit rule's constraints for a PERMIT, the deciding
    escalate rule's for an ESCALATE. A constraint that cannot be computed, or two permit
    rules binding one name to different values, is SILENCE: never a PERMIT without the
    constraints its rules state. ``size`` is None when the caller has already found the
    request within every program's cost limit (``CompiledBlock.free_up_to``);
    ``activation`` is None when the request was decided natively, where no constraint
    is computed (``CompiledBlock.native``)."""
    if decision.outcome is Outcome.PERMIT:
        rules = permits
    elif decision.outcome is Outcome.ESCALATE:
        rules = escalates[:1]
    else:
        return decision
    for rule in rules:
        if rule.constraints or rule.single_use:
            break
    else:
        return decision  # nothing to bind
    values: dict[str, Any] = {}
    forms: dict[str, tuple[bytes, str]] = {}  # name -> (canonical JSON, rule that bound it)
    for rule in rules:
        for constraint in rule.constraints:
            try:
                value = _constraint_value(rule, constraint, activation, size)
            except _Unbound as exc:
                return _failed(rule, str(exc))
            form = canonical_json(value)  # value_problem has checked that it has one
            earlier = forms.get(constraint.name)
            if earlier is not None and earlier[0] != form:
                return Decision(
                    Outcome.SILENCE,
                    rule.id,
                    Reason.CONFLICT,
                    f"permit rules {earlier[1]} and {rule.id} bind constraint "
                    f"{constraint.name} to different values",
                )
            forms[constraint.name] = (form, rule.id)
            values[constraint.name] = value
    return dataclasses.replace(
        decision,
        constraints=values or None,
        single_use=any(rule.single_use for rule in rules),
    )


def _constraint_value(
    rule: CompiledRule,
    constraint: CompiledConstraint,
    activation: cel.Context | None,
    size: InputSize | None,
) -> Any:
    """The literal, or the program's result checked as a value of its constraint."""
    if constraint.program is None:
        return constraint.value
    where = f"rule {rule.id} constraint {constraint.name}"
    if activation is None:  # a natively decided block computes no constraint; SILENCE
        raise _Unbound(f"{where} has no CEL activation to be computed with")
    cost = constraint.cost
    if size is not None and cost is not None:
        if cost.unreadable is not None:
            raise _Unbound(f"{where} cannot be bounded in cost: {cost.unreadable}")
        if not cost.within_limit(size):
            raise _Unbound(
                f"{where} exceeds the evaluation cost limit: estimated "
                f"{cost.steps(size):,.0f} steps > {MAX_EVALUATION_COST:,} for this request"
            )
    try:
        value = constraint.program.execute(activation)
    except Exception as exc:  # as a condition's: any failure is SILENCE (re-raised typed)
        raise _Unbound(f"{where} could not be evaluated: {type(exc).__name__}: {exc}") from exc
    try:
        problem = value_problem(constraint.name, value)
    except (CanonicalizationError, TypeError, ValueError) as exc:
        problem = str(exc)
    if problem is not None:
        raise _Unbound(f"{where} computed an invalid value: {problem}")
    return value


def _raised(rule: CompiledRule, exc: Exception) -> str:
    return f"rule {rule.id} could not be evaluated: {type(exc).__name__}: {exc}"


def _not_boolean(rule: CompiledRule, result: object) -> str:
    return f"rule {rule.id} returned {type(result).__name__}, not a boolean"


def _failed(rule: CompiledRule, message: str) -> Decision:
    return Decision(Outcome.SILENCE, rule.id, Reason.EVALUATION_ERROR, message)


def _missing(path: str) -> Decision:
    return Decision(
        Outcome.SILENCE, None, Reason.MISSING_CONTEXT, f"required field {path} is missing"
    )


def _row(
    permits: list[CompiledRule], denies: list[CompiledRule], escalates: list[CompiledRule]
) -> str:
    if permits and denies:
        return "permit and deny rules match"
    if denies:
        return "only deny rules match"
    if escalates:
        return "escalate rules match (no deny)"
    if permits:
        return "only permit rules match"
    return "no rule matches"


def _conclude(
    permits: list[CompiledRule], denies: list[CompiledRule], escalates: list[CompiledRule]
) -> Decision:
    """The decision table (docs/policy-language.md, "Precedence"): a conflict of permit and
    deny is SILENCE; a deny wins over an escalate (approval never overrules a deny); an
    escalate wins over a permit (it is never satisfied without its approvals)."""
    if permits and denies:
        return Decision(
            Outcome.SILENCE,
            denies[0].id,
            Reason.CONFLICT,
            f"permit rule {permits[0].id} and deny rule {denies[0].id} both match",
        )
    if denies:
        return denies[0].alone
    if escalates:
        return escalates[0].alone
    if len(permits) == 1:
        return permits[0].alone
    if permits:
        ttl = min(r.ttl_seconds or DEFAULT_PERMIT_TTL_SECONDS for r in permits)
        return Decision(Outcome.PERMIT, permits[0].id, None, None, ttl)
    return _NO_RULE_PERMITS


def _alone(rule: CompiledRule) -> Decision:
    """What ``rule`` decides when the decision table's row is its alone: its deny, its
    escalation, or its permit as the only permit rule that matched. An effect the table
    does not know (the document parser admits none) is SILENCE, never a PERMIT."""
    if rule.effect == "permit":
        return Decision(
            Outcome.PERMIT, rule.id, None, None, rule.ttl_seconds or DEFAULT_PERMIT_TTL_SECONDS
        )
    if rule.effect == "deny":
        return Decision(
            Outcome.DENY,
            rule.id,
            rule.reason or Reason.DENIED,
            rule.message or f"denied by rule {rule.id}",
        )
    if rule.effect == "escalate":
        assert rule.escalation is not None  # the document sets it on every escalate rule
        return Decision(
            Outcome.ESCALATE,
            rule.id,
            rule.reason or Reason.APPROVAL_REQUIRED,
            rule.message or f"rule {rule.id} requires approval",
            escalation=rule.escalation,
        )
    return _failed(rule, f"rule {rule.id} has an effect the decision table does not know")


_NO_RULE_PERMITS = Decision(
    Outcome.DENY, None, Reason.NO_MATCHING_RULE, "no rule permits this request"
)


def _present(request: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    value: Any = request
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) is None:
            return False
        value = value[key]
    return True
