"""Native conditions (``policy.native``): Python answers only where CEL would answer the same.

The ``cel`` package is the authority. A native condition may leave any request
undecided (``None``), and the engine then runs CEL; where it answers, it must answer
what the package answers, and it must never answer where the package fails. These
properties hold every native form to the package on generated values of every type,
and the engine's native decisions to ``trace``'s, which always runs CEL.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from execauth.errors import InvalidRequest
from execauth.policy.decision import Outcome, PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import CompiledBlock, CompiledPolicy, compile_policy, evaluate, trace
from execauth.policy.native import native_condition
from execauth.request import parse_execute_request
from execauth.wire_time import truncate_to_millis
from tests.policy.generators import COOKBOOK_VOCABULARY, cookbook_policies, request_bodies

PROPERTIES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REF = PolicyRef("p", 1, "sha256:" + "0" * 64)
NOW = datetime(2026, 11, 23, 10, 0, 0, 123000, tzinfo=UTC)
ORG = {"id": "org_n", "plan": "free"}

# Values of every kind a JSON request holds, and the edges between CEL's types and
# Python's: bool against int, int against double, CEL's int range, strings CEL sizes in
# bytes, null, nested lists and maps.
_scalars = st.sampled_from(
    (None, True, False, 0, 1, 2, -1, 1.0, 1.5, 2**63 - 1, 2**63, 2**64 - 1,
     "", "x", "main", "m", "CHG-1", "é", "é😀", "xé", "EUR", "a")
)  # fmt: skip
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(("a", "b", "x", "main")), inner, max_size=3)
    ),
    max_leaves=6,
)
_field = st.sampled_from(
    ("context.a", "context.b", "payload.a", "payload.xs", "actor", "context",
     "payload.xs[0]", "payload.xs[1]", 'context["a"]', "context.a.b")
)  # fmt: skip
_literal = st.sampled_from(
    ('"x"', '"main"', '"é"', '"a"', "1", "0", "2", "true", "false", "9223372036854775807")
)
_nows = st.datetimes(datetime(2025, 1, 1), datetime(2028, 1, 1), timezones=st.just(UTC)).map(
    truncate_to_millis
)
_atoms = (
    st.builds("{} {} {}".format, _field, st.sampled_from(("==", "!=")), _literal),
    st.builds("{} {} {}".format, _field, st.sampled_from(("<", "<=", ">", ">=")), _literal),
    st.builds("{} in [{}, {}]".format, _field, _literal, _literal),
    st.builds("{} in {}".format, _literal, _field),
    st.builds("{} in {}".format, _field, _field),
    st.builds(
        '{}.{}("{}")'.format,
        _field,
        st.sampled_from(("startsWith", "endsWith", "contains")),
        st.sampled_from(("", "m", "x", "é")),
    ),
    st.builds("size({}) {} {}".format, _field, st.sampled_from(("==", ">")), _literal),
    st.builds("{}.size() == {}".format, _field, _literal),
    st.builds("{}.exists(v, v == {})".format, _field, _literal),
    st.builds("{}.exists(v, v.startsWith({}))".format, _field, _literal),
    st.builds(
        'now {} timestamp("{}")'.format,
        st.sampled_from(("<", ">=", "==")),
        st.sampled_from(
            ("2026-11-23T10:00:00.123Z", "2026-01-05T00:00:00+01:00", "2027-01-01T00:00:00Z")
        ),
    ),
    _field,
    st.builds(
        "{}.{}() {} {}".format,
        st.sampled_from(("now", "context.a")),
        st.sampled_from(("getDayOfWeek", "getHours")),
        st.sampled_from(("==", "<", ">=")),
        st.sampled_from(("0", "5", "6", "15", "23")),
    ),
    st.builds(
        "has({})".format, st.sampled_from(("context.a", "payload.xs", "context.a.b", "org.plan"))
    ),
    st.sampled_from(("true", "false", 'org.plan == "free"')),
)
_atom = st.one_of(_atoms)
_conditions = st.recursive(
    _atom,
    lambda inner: (
        st.builds("({} && {})".format, inner, inner)
        | st.builds("({} || {})".format, inner, inner)
        | st.builds("!({})".format, inner)
    ),
    max_leaves=4,
)
_variables = st.fixed_dictionaries(
    {
        "actor": _values,
        "context": st.dictionaries(st.sampled_from(("a", "b")), _values, max_size=2),
        "payload": st.dictionaries(st.sampled_from(("a", "xs")), _values, max_size=2),
    }
)


def _cel(source: str, variables: dict[str, Any]) -> Any:
    """What the ``cel`` package answers, or the exception it raises."""
    try:
        return cel.compile(source).execute(cel.Context(variables))
    except Exception as exc:  # the package raises TypeError, KeyError, RuntimeError, ...
        return exc


@PROPERTIES
@given(_conditions, _variables, _nows)
def test_a_native_answer_is_the_cel_packages_answer(
    source: str, variables: dict[str, Any], now: datetime
) -> None:
    condition = native_condition(source)
    if condition is None:
        return
    scope = {**variables, "now": now, "org": dict(ORG)}
    answer = condition(scope)
    if answer is not None:
        assert answer is _cel(source, scope), source


@pytest.mark.parametrize("atom", range(len(_atoms)))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_each_native_form_answers_as_the_cel_package(atom: int, data: st.DataObject) -> None:
    # Form by form, so that each one meets the values at its edges often enough.
    source = data.draw(_atoms[atom])
    variables = data.draw(_variables)
    condition = native_condition(source)
    if condition is None:
        return
    scope = {**variables, "now": data.draw(_nows), "org": dict(ORG)}
    answer = condition(scope)
    if answer is not None:
        assert answer is _cel(source, scope), source


@pytest.mark.parametrize(
    "source",
    [
        'context.branch == "main" && actor.startsWith("release-")',
        '"ticket" in context && context.ticket.startsWith("CHG-")',
        'payload.amount <= 10000 && payload.currency in ["EUR", "USD"]',
        '!(payload.currency in ["EUR", "USD"])',
        'now < timestamp("2026-01-05T00:00:00Z") && now >= timestamp("2025-12-19T16:00:00Z")',
        'payload.labels.exists(l, l == "frozen")',
        "size(context.ticket) > 100",
        "payload.canary",
        'has(context.incident) && payload.argv[0] == "git"',
        "now.getDayOfWeek() in [0, 6] && now.getHours() >= 15",
    ],
)
def test_the_common_forms_compile_natively(source: str) -> None:
    assert native_condition(source) is not None


@pytest.mark.parametrize(
    "source",
    [
        "payload.amount > 1.5",  # a double: CEL compares it with ints
        "context.x == null",
        "-1 < payload.n",
        "payload.xs[context.i] == 1",
        "type(payload.n) == int",
        'context.branch.matches("^rel")',
        "payload.n > 0 ? true : false",
        '"a\\tb" == context.x',  # an escape: left whole to CEL
        'now > timestamp("2026-13-01T00:00:00Z")',
        'now.getHours("Europe/Paris") >= 15',
        'payload.xs.all(x, x == "a")',
    ],
)
def test_other_forms_are_left_to_cel(source: str) -> None:
    assert native_condition(source) is None


@pytest.mark.parametrize(
    ("source", "variables"),
    [
        ("context.n == 1", {"context": {"n": 1.0}}),  # CEL: true across int and double
        ("context.n == 1", {"context": {"n": True}}),  # Python: True == 1; CEL: false
        ('context.s == "x"', {"context": {}}),  # CEL: no such key
        ("size(context.s) == 1", {"context": {"s": "é"}}),  # the package counts bytes: 2
        ("context.n < 1", {"context": {"n": 2**63}}),  # a uint to the package
        ('context.xs.exists(x, x == "a")', {"context": {"xs": [1, "a"]}}),
        ('"a" in context.xs', {"context": {"xs": [1, "a"]}}),
        ("context.flag", {"context": {"flag": "yes"}}),  # not a boolean: CEL's error
        ("context.xs[2] == 1", {"context": {"xs": [1]}}),  # out of range
        ("has(context.s.t)", {"context": {"s": "x"}}),  # has() of a string's field
    ],
)
def test_a_value_cel_treats_differently_is_left_undecided(
    source: str, variables: dict[str, Any]
) -> None:
    condition = native_condition(source)
    assert condition is not None
    assert condition(variables) is None


def test_a_chain_too_deep_to_compile_is_left_to_cel() -> None:
    # A stored version is not held to the publish-time length limit.
    assert native_condition(" && ".join(['actor == "x"'] * 1000)) is None


def _nested_exists(depth: int) -> str:
    source = "e0 == 1"
    for level in range(1, depth):
        source = f"context.xs.exists(e{level}, {source})"
    return f"context.xs.exists(e0, {source})"


def _nested_or(depth: int) -> str:
    source = 'actor == "x"'
    for _ in range(depth):
        source = f'actor == "y" || ({source})'
    return source


def test_conditions_nested_past_pythons_limits_are_left_to_cel() -> None:
    # The generated function nests a block per exists and per junction's right side;
    # Python allows 20 nested loops and 100 levels of indentation.
    assert native_condition(_nested_exists(10)) is not None
    assert native_condition(_nested_exists(25)) is None
    assert native_condition(_nested_or(40)) is not None
    assert native_condition(_nested_or(120)) is None


@pytest.mark.parametrize(
    "text", ['" or True or "', '__import__("os").getpid()', "x}; {y", "v.get", "U"]
)
def test_a_literal_that_reads_as_python_is_compared_as_a_string(text: str) -> None:
    # Literals reach the generated function as values, never as its source text.
    cases = [
        (f"context.a == '{text}'", {"a": text}, {"a": "y"}),
        (f"context['{text}'] == 'x'", {text: "x"}, {text: "y"}),
    ]
    for source, matching, other in cases:
        condition = native_condition(source)
        assert condition is not None
        assert condition({"context": matching}) is True is _cel(source, {"context": matching})
        assert condition({"context": other}) is False is _cel(source, {"context": other})


def test_a_false_side_decides_and_whatever_the_other_side() -> None:
    # CEL's && is false when either side is, even when the other fails (both orders).
    for source in ('context.missing == "x" && false', 'false && context.missing == "x"'):
        condition = native_condition(source)
        assert condition is not None
        assert condition({"context": {}}) is False
        assert _cel(source, {"context": {}}) is False


# --- the engine ---------------------------------------------------------------------------


def _block(*conditions: str, effect: str = "deny") -> CompiledBlock:
    rules = [{"id": f"r{i}", effect: c} for i, c in enumerate(conditions)]
    document = {"policy_id": "p", "surfaces": [{"match": "a.b", "rules": rules}]}
    parsed = parse_policy_document(json.dumps(document), policy_id="p")
    return compile_policy(parsed, REF).blocks[0]


def _request(context: dict[str, Any]) -> dict[str, Any]:
    body = {"surface": "a.b", "action": "run", "actor": "alice", "context": context}
    return parse_execute_request(body, None).evaluation_input()


def test_a_block_of_native_conditions_is_decided_natively() -> None:
    assert _block('context.branch == "hotfix"').native


def test_one_condition_left_to_cel_keeps_the_whole_block_on_cel() -> None:
    assert not _block('context.branch == "hotfix"', 'context.ticket.matches("^CHG")').native


def test_an_undecided_rule_hands_the_request_to_cel() -> None:
    block = _block("context.n == 1", effect="permit")  # 1.0 == 1 is CEL's to answer: true
    decision = evaluate(block, _request({"n": 1.0}), now=NOW, org=ORG, request_converts=True)
    assert (decision.outcome, decision.rule_id) == (Outcome.PERMIT, "r0")


def test_a_native_condition_that_raises_leaves_the_decision_to_cel() -> None:
    block = _block('context.branch == "hotfix"')

    def broken(variables: Any) -> bool:
        raise RuntimeError("a fault in a native condition")

    rules = tuple(dataclasses.replace(rule, native=broken) for rule in block.rules)
    faulty = CompiledBlock(block.pattern, block.require, rules)
    request = _request({"branch": "hotfix"})
    decision = evaluate(faulty, request, now=NOW, org=ORG, request_converts=True)
    assert (decision.outcome, decision.rule_id) == (Outcome.DENY, "r0")  # CEL's answer


def test_a_now_cel_might_not_hold_is_left_to_cel() -> None:
    block = _block('context.branch == "hotfix"')
    # A naive now: CEL reads it in local time, so the activation (not Python) decides it.
    naive = datetime(2026, 11, 23, 10)
    request = _request({"branch": "main"})
    told = evaluate(block, request, now=naive, org=ORG, request_converts=True)
    assert told == trace(block, request, now=naive, org=ORG).decision


def test_a_request_over_a_rules_cost_limit_is_silence_not_a_native_permit() -> None:
    # Quadratic in the list: 1,000 items are over the limit, though the first pair matches.
    block = _block("payload.xs.exists(x, payload.xs.exists(y, x == y))", effect="permit")
    assert block.native
    request = {**_request({"branch": "main"}), "payload": {"xs": ["a"] * 1000}}
    decision = evaluate(block, request, now=NOW, org=ORG, request_converts=True)
    assert decision.outcome is Outcome.SILENCE
    assert decision == trace(block, request, now=NOW, org=ORG).decision


def test_org_facts_cel_cannot_hold_are_silence_as_with_cel() -> None:
    block = _block('context.branch == "hotfix"')
    request = _request({"branch": "main"})
    org = {"id": "org_n", "plan": {"free"}}  # a set: CEL refuses it, read or not
    decision = evaluate(block, request, now=NOW, org=org, request_converts=True)
    assert decision.outcome is Outcome.SILENCE
    assert decision == trace(block, request, now=NOW, org=org).decision


def test_a_request_value_cel_cannot_hold_is_silence_as_with_cel() -> None:
    block = _block('context.branch == "hotfix"')
    # A set: msgspec writes it as an array (so the cost check passes it), CEL refuses it.
    request = {**_request({"branch": "main"}), "payload": {"bad": {1, 2}}}
    decision = evaluate(block, request, now=NOW, org=ORG)
    assert decision.outcome is Outcome.SILENCE
    assert decision == trace(block, request, now=NOW, org=ORG).decision


_native_policies = st.lists(
    st.tuples(st.sampled_from(("permit", "deny")), _conditions), min_size=1, max_size=4
)


@PROPERTIES
@given(_native_policies, request_bodies(COOKBOOK_VOCABULARY))
def test_a_native_decision_is_the_decision_cel_makes(
    rules: list[tuple[str, str]], body: dict[str, Any]
) -> None:
    document = {
        "policy_id": "p",
        "surfaces": [
            {
                "match": "**",
                "rules": [{"id": f"r{i}", effect: c} for i, (effect, c) in enumerate(rules)],
            }
        ],
    }
    block = compile_policy(parse_policy_document(json.dumps(document), policy_id="p"), REF).blocks[
        0
    ]
    try:
        request = parse_execute_request(body, None)
    except InvalidRequest:  # the gateway answers 400: nothing is evaluated
        return
    normalized = request.evaluation_input()
    decided = evaluate(block, normalized, now=NOW, org=ORG, request_converts=request.plain)
    assert decided == trace(block, normalized, now=NOW, org=ORG).decision


def test_the_benchmark_policy_and_most_of_the_cookbook_are_decided_natively() -> None:
    def blocks(text: str, policy_id: str) -> tuple[CompiledBlock, ...]:
        document = parse_policy_document(text, policy_id=policy_id)
        policy: CompiledPolicy = compile_policy(document, REF)
        return policy.blocks

    bench = Path(__file__).parents[2] / "bench" / "policy.yaml"
    assert all(block.native for block in blocks(bench.read_text(), "bench"))
    cookbook = [b for pid, text in cookbook_policies().items() for b in blocks(text, pid)]
    assert any(block.native for block in cookbook)


@PROPERTIES
@given(st.sampled_from(sorted(cookbook_policies().items())), request_bodies(COOKBOOK_VOCABULARY))
def test_the_cookbook_decides_natively_as_cel_does(
    policy: tuple[str, str], body: dict[str, Any]
) -> None:
    policy_id, text = policy
    compiled = compile_policy(parse_policy_document(text, policy_id=policy_id), REF)
    try:
        request = parse_execute_request(body, None)
    except InvalidRequest:  # the gateway answers 400: nothing is evaluated
        return
    normalized = request.evaluation_input()
    now = truncate_to_millis(NOW)
    for block in compiled.blocks:
        decided = evaluate(block, normalized, now=now, org=ORG, request_converts=request.plain)
        assert decided == trace(block, normalized, now=now, org=ORG).decision
