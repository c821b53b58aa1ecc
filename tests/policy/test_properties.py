"""Properties of evaluation (docs/policy-language.md), over generated policies and requests.

Policies: one block with ``require`` paths and permit/deny rules whose CEL conditions
read context and payload fields — including conditions that fail on a missing field, a
wrong type, a null actor or a division by zero. Requests: ``tests.policy.generators``
(missing, extra and wrong-typed fields). Each property is one test.

``evaluate`` decides without recording, ``trace`` records for explain: the last
properties hold them to one another and to evaluation as it was before the activation
left out the variables no rule reads (``_decided_as_before``), on ordinary requests,
on values CEL cannot hold and on requests large enough for the cost limit to refuse.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import cel
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from execauth.canonical import CanonicalizationError, canonical_form, canonical_json
from execauth.errors import InvalidRequest
from execauth.policy.cost import _measure_iteratively
from execauth.policy.decision import Decision, Outcome, PolicyRef, Reason
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import (
    CompiledBlock,
    CompiledRule,
    _conclude,
    _converts,
    _present,
    _run,
    compile_policy,
    evaluate,
    trace,
)
from execauth.receipts import build_receipt
from execauth.request import ExecuteRequest, parse_execute_request
from execauth.wire_time import truncate_to_millis
from tests.policy.generators import Vocabulary, python_values, request_bodies

PROPERTIES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = ("a", "b", "n", "s", "xs", "m")
VOCABULARY = Vocabulary(surfaces=("a.b",), fields=FIELDS, actors=("alice", "bob"))
REQUIRE_PATHS = ("actor", "action", "context.a", "payload.n", "context.m.a")
REF = PolicyRef("p", 3, "sha256:" + "0" * 64)

_field = st.builds("{}.{}".format, st.sampled_from(("context", "payload")), st.sampled_from(FIELDS))
_literal = st.sampled_from(("1", '"x"', '"main"', "true", "null", "1.5", "[]", "-3"))
_int = st.integers(-2, 1001).map(str)
_risky_atom = st.one_of(
    st.builds("{} == {}".format, _field, _literal),
    st.builds("{} > {}".format, _field, _int),
    st.builds('{}.startsWith("m")'.format, _field),
    st.builds("size({}) > {}".format, _field, _int),
    st.builds("{} in {}".format, _literal, _field),
    st.builds("{}.exists(x, x == {})".format, _field, _literal),
    st.builds("1 / {} > 0".format, _field),
    st.builds("{}.a == 1".format, _field),
    _field,  # not a boolean unless the value is one
    st.sampled_from(('actor.startsWith("a")', "action == 'run'", "true", "false")),
)
# Conditions that never fail: a field is read only after has() and a type check.
_safe_atom = st.one_of(
    st.builds("has({})".format, _field),
    st.builds("has({0}) && type({0}) == int && {0} > {1}".format, _field, _int),
    st.builds('has({0}) && type({0}) == string && {0}.startsWith("m")'.format, _field),
    st.sampled_from(('org.plan == "free"', "now.getHours() >= 12", 'actor == "alice"')),
    st.sampled_from(("true", "false")),
)

_any_atom = _risky_atom | _safe_atom
# Quadratic in the list it reads: refused by the cost limit for a long enough list.
_costly_atom = st.builds("{0}.all(x, {0}.exists(y, x == y))".format, _field)


def _conditions(atom: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.recursive(
        atom,
        lambda inner: st.one_of(
            st.builds("({} && {})".format, inner, inner),
            st.builds("({} || {})".format, inner, inner),
            st.builds("!({})".format, inner),
            st.builds("({} ? {} : {})".format, inner, inner, inner),
        ),
        max_leaves=4,
    )


@dataclass(frozen=True)
class Policy:
    document: dict[str, Any]
    block: CompiledBlock

    @property
    def require(self) -> list[str]:
        paths: list[str] = self.document["surfaces"][0].get("require", [])
        return paths


@st.composite
def policies(
    draw: st.DrawFn, atom: st.SearchStrategy[str] = _any_atom, *, conflict: bool = False
) -> Policy:
    """A one-block policy for ``a.b``; with ``conflict``, a permit and a deny that match."""
    rules: list[dict[str, Any]] = []
    for condition in draw(st.lists(_conditions(atom), min_size=1, max_size=4)):
        effect = draw(st.sampled_from(("permit", "deny")))
        rule: dict[str, Any] = {effect: condition}
        if effect == "permit" and draw(st.booleans()):
            rule["ttl"] = draw(st.sampled_from(("30s", "10m", "2h")))
        if effect == "deny" and draw(st.booleans()):
            rule["reason"] = "SERVICE_POLICY_GENERATED"
        rules.append(rule)
    if conflict:
        for effect in ("permit", "deny"):
            rules.insert(draw(st.integers(0, len(rules))), {effect: "true"})
    for index, rule in enumerate(rules):
        rule["id"] = f"r{index}"
    block: dict[str, Any] = {"match": "a.b", "rules": rules}
    require = draw(st.lists(st.sampled_from(REQUIRE_PATHS), unique=True, max_size=2))
    if require:
        block["require"] = require
    document = {"policy_id": "p", "surfaces": [block]}
    parsed = parse_policy_document(json.dumps(document), policy_id="p")
    return Policy(document, compile_policy(parsed, REF).blocks[0])


nows = st.datetimes(datetime(2025, 1, 1), datetime(2028, 1, 1), timezones=st.just(UTC)).map(
    truncate_to_millis
)
orgs = st.sampled_from(("free", "standard")).map(lambda plan: {"id": "org_p", "plan": plan})


def _parsed(body: dict[str, Any]) -> ExecuteRequest:
    try:
        return parse_execute_request(body, None)
    except InvalidRequest:
        reject()  # the gateway answers 400: nothing is evaluated


def _record(request: ExecuteRequest, decision: Decision, now: datetime, org: Any) -> bytes:
    """The canonical bytes of what a decision produces: its fields and the receipt."""
    receipt = build_receipt(
        receipt_id="service_rcpt_0123456789abcdef",
        execution_id="service_exec_01JAAAAAAAAAAAAAAAAAAAAAAA",
        request=request, decision=decision, policy=REF, org_id=org["id"],
        issuer="https://execauth.test", now=now, key_id="service_key_0123456789abcdef",
    )  # fmt: skip
    fields = {
        "decision": decision.outcome.value, "rule_id": decision.rule_id,
        "reason": decision.reason, "message": decision.message, "ttl": decision.ttl_seconds,
    }  # fmt: skip
    return canonical_json({"decision": fields, "receipt": receipt})


def _oracle(block: CompiledBlock, request: Mapping[str, Any], now: datetime, org: Any) -> list[Any]:
    """Each rule's value when run on its own, outside the engine; an exception if it fails."""
    activation = cel.Context({**request, "now": now, "org": dict(org)})
    values: list[Any] = []
    for rule in block.rules:
        try:
            values.append(rule.program.execute(activation))
        except Exception as exc:  # the oracle records any failure
            values.append(exc)
    return values


def _errs(value: Any) -> bool:
    return value is not True and value is not False


# --- the properties -------------------------------------------------------------------


@PROPERTIES
@given(policies(), request_bodies(VOCABULARY), nows, orgs)
def test_evaluation_is_deterministic(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    request = _parsed(body)
    first = evaluate(policy.block, request.evaluation_input(), now=now, org=org)
    again = evaluate(policy.block, request.evaluation_input(), now=now, org=org)
    twin = _parsed(copy.deepcopy(body))
    copied = evaluate(policy.block, twin.evaluation_input(), now=now, org=copy.deepcopy(org))
    assert first == again == copied
    record = _record(request, first, now, org)
    assert record == _record(request, again, now, org) == _record(twin, copied, now, org)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.binary(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
raw_inputs = st.fixed_dictionaries(
    {
        "surface": st.just("a.b"),
        "action": st.none() | st.text(max_size=4) | st.integers(),
        "actor": st.none() | st.text(max_size=4) | st.integers(),
        "context": st.dictionaries(st.sampled_from(FIELDS), json_values) | json_values,
        "payload": st.dictionaries(st.sampled_from(FIELDS), json_values) | json_values,
    }
)


@PROPERTIES
@given(policies(), raw_inputs, nows, orgs)
def test_no_input_makes_evaluation_raise(
    policy: Policy, request: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    # Any input, including what the parser would refuse (huge integers, NaN, bytes,
    # a non-object context): the engine always decides.
    assert isinstance(evaluate(policy.block, request, now=now, org=org), Decision)


@PROPERTIES
@given(policies(), request_bodies(VOCABULARY), nows, orgs)
def test_never_permit_when_a_considered_rule_errors(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    request = _parsed(body).evaluation_input()
    decision = evaluate(policy.block, request, now=now, org=org)
    values = _oracle(policy.block, request, now, org)
    failing = next(
        (rule for rule, v in zip(policy.block.rules, values, strict=True) if _errs(v)), None
    )
    if failing is None:
        return
    assert decision.outcome is Outcome.SILENCE
    if decision.reason != Reason.MISSING_CONTEXT:
        assert (decision.reason, decision.rule_id) == (Reason.EVALUATION_ERROR, failing.id)


def _container(request: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The map that holds ``path``'s last key (made a map on the way if needed), and the key."""
    *parents, last = path.split(".")
    target = request
    for key in parents:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    return target, last


def _without(request: dict[str, Any], path: str, how: str) -> dict[str, Any]:
    """``request`` with ``path`` absent: deleted, null, or its parent not a map."""
    broken = copy.deepcopy(request)
    target, last = _container(broken, path)
    if how == "delete" and "." in path:
        target.pop(last, None)
    elif how == "parent" and "." in path:
        holder, parent = _container(broken, path.rpartition(".")[0])
        holder[parent] = [1, 2]
    else:
        target[last] = None
    return broken


@PROPERTIES
@given(
    policies(),
    request_bodies(VOCABULARY),
    nows,
    orgs,
    st.sampled_from(("delete", "null", "parent")),
)
def test_a_missing_require_path_is_always_silence(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str], how: str
) -> None:
    assume(policy.require)
    request = _without(_parsed(body).evaluation_input(), policy.require[-1], how)
    decision = evaluate(policy.block, request, now=now, org=org)
    assert (decision.outcome, decision.reason, decision.rule_id) == (
        Outcome.SILENCE, Reason.MISSING_CONTEXT, None,
    )  # fmt: skip


def _with_required_paths(request: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    filled = copy.deepcopy(request)
    for path in paths:
        target, last = _container(filled, path)
        if target.get(last) is None:
            target[last] = "present"
    return filled


@PROPERTIES
@given(policies(_safe_atom, conflict=True), request_bodies(VOCABULARY), nows, orgs)
def test_a_permit_and_a_deny_both_matching_is_always_conflict(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    request = _with_required_paths(_parsed(body).evaluation_input(), policy.require)
    decision = evaluate(policy.block, request, now=now, org=org)
    values = _oracle(policy.block, request, now, org)
    matched = [
        rule for rule, value in zip(policy.block.rules, values, strict=True) if value is True
    ]
    first_deny = next(rule for rule in matched if rule.effect == "deny")
    assert (decision.outcome, decision.reason, decision.rule_id) == (
        Outcome.SILENCE, Reason.CONFLICT, first_deny.id,
    )  # fmt: skip


def test_the_generated_conditions_do_fail() -> None:
    """The error properties are not vacuous: generated rules fail on generated requests."""
    failures: list[bool] = []

    @settings(max_examples=60, deadline=None, database=None)
    @given(policies(), request_bodies(VOCABULARY), nows, orgs)
    def probe(policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]) -> None:
        try:
            request = parse_execute_request(body, None).evaluation_input()
        except InvalidRequest:
            return
        failures.append(any(map(_errs, _oracle(policy.block, request, now, org))))

    probe()
    assert any(failures)
    assert not all(failures)


# --- evaluate, trace and evaluation as it was ------------------------------------------


def _decided_as_before(
    block: CompiledBlock, request: Mapping[str, Any], now: Any, org: Mapping[str, Any]
) -> Decision:
    """Evaluation before the lean path: every variable converted, the input measured
    iteratively and every rule's cost checked before it runs (the reference)."""
    for path in block.require:
        if not _present(request, path):
            message = f"required field {'.'.join(path)} is missing"
            return Decision(Outcome.SILENCE, None, Reason.MISSING_CONTEXT, message)
    try:
        activation = cel.Context({**request, "now": now, "org": dict(org)})
    except Exception as exc:  # the reference records any failure, as the engine does
        message = f"request cannot be evaluated: {exc}"
        return Decision(Outcome.SILENCE, None, Reason.EVALUATION_ERROR, message)
    size = _measure_iteratively({**request, "org": org})
    matched: dict[str, list[CompiledRule]] = {"permit": [], "deny": [], "escalate": []}
    for rule in block.rules:
        value = _run(rule, activation, size)
        if isinstance(value, str):
            return Decision(Outcome.SILENCE, rule.id, Reason.EVALUATION_ERROR, value)
        if value:
            matched[rule.effect].append(rule)
    return _conclude(matched["permit"], matched["deny"], matched["escalate"])


def _agree(block: CompiledBlock, request: Mapping[str, Any], now: Any, org: Any) -> Decision:
    decision = evaluate(block, request, now=now, org=org)
    assert decision == trace(block, request, now=now, org=org).decision
    assert decision == _decided_as_before(block, request, now, org)
    return decision


@PROPERTIES
@given(policies(), request_bodies(VOCABULARY), nows, orgs)
def test_evaluate_decides_as_trace_and_as_before(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    _agree(policy.block, _parsed(body).evaluation_input(), now, org)


odd_nows = nows | st.sampled_from(
    (datetime(2026, 3, 14, 12), datetime(2026, 3, 14, 12, tzinfo=timezone(timedelta(hours=-5))))
)
odd_requests = st.fixed_dictionaries(
    {"surface": st.just("a.b")},
    optional={name: python_values for name in ("action", "actor", "context", "payload")},
)


@PROPERTIES
@given(
    policies(), odd_requests, odd_nows, orgs | st.dictionaries(st.text(max_size=2), python_values)
)
def test_evaluate_decides_as_trace_and_as_before_on_values_cel_cannot_hold(
    policy: Policy, request: dict[str, Any], now: datetime, org: dict[str, Any]
) -> None:
    # A variable no rule reads is left out of the activation only when it certainly
    # converts: a request CEL cannot hold is refused whole, naming the same variable.
    _agree(policy.block, request, now, org)


@PROPERTIES
@given(python_values)
def test_what_the_activation_leaves_out_certainly_converts(value: Any) -> None:
    if _converts(value):
        cel.Context({"x": value})  # does not raise


@PROPERTIES
@given(python_values)
def test_a_plain_value_converts_to_cel_whole(value: Any) -> None:
    # What lets a parsed request skip the walk (ExecuteRequest.plain, evaluate's
    # request_converts): whatever is plain JSON, CEL holds.
    try:
        _, plain = canonical_form(value)
    except CanonicalizationError:
        return  # the parser refuses a request holding it
    if plain:
        cel.Context({"x": value})  # does not raise


bodies_with_odd_payloads = st.tuples(
    request_bodies(VOCABULARY), st.dictionaries(st.text(max_size=3), python_values, max_size=3)
).map(lambda drawn: {**drawn[0], "payload": drawn[1]})


@PROPERTIES
@given(policies(), request_bodies(VOCABULARY) | bodies_with_odd_payloads, nows, orgs)
def test_a_parsed_request_decides_the_same_when_evaluate_is_told_it_converts(
    policy: Policy, body: dict[str, Any], now: datetime, org: dict[str, str]
) -> None:
    request = _parsed(body)
    normalized = request.evaluation_input()
    told = evaluate(policy.block, normalized, now=now, org=org, request_converts=request.plain)
    assert told == _decided_as_before(policy.block, normalized, now, org)


def _with_long_list(request: dict[str, Any], length: int) -> dict[str, Any]:
    return {**request, "payload": {**request["payload"], "xs": list(range(length))}}


@PROPERTIES
@given(
    policies(_any_atom | _costly_atom),
    request_bodies(VOCABULARY),
    st.integers(0, 2000),
    nows,
    orgs,
)
def test_evaluate_decides_as_trace_and_as_before_when_requests_are_large(
    policy: Policy, body: dict[str, Any], length: int, now: datetime, org: dict[str, str]
) -> None:
    # Past CompiledBlock.free_up_to, evaluate checks each rule's cost, as trace does.
    request = _with_long_list(_parsed(body).evaluation_input(), length)
    _agree(policy.block, request, now, org)


def test_the_large_requests_do_reach_the_cost_limit() -> None:
    """The last property is not vacuous: rules are refused, and others run past the bound."""
    messages: list[str] = []

    @settings(max_examples=80, deadline=None, database=None)
    @given(policies(_costly_atom), st.integers(0, 2000))
    def probe(policy: Policy, length: int) -> None:
        empty: dict[str, Any] = {"surface": "a.b", "context": {}, "payload": {}}
        request = _with_long_list(_with_required_paths(empty, policy.require), length)
        now = datetime(2026, 1, 1, tzinfo=UTC)
        decision = evaluate(policy.block, request, now=now, org={"id": "org_p", "plan": "free"})
        messages.append(decision.message or "")

    probe()
    assert any("exceeds the evaluation cost limit" in m for m in messages)
    assert not all("exceeds the evaluation cost limit" in m for m in messages)
