"""Bounded evaluation (execauth.policy.cost): publish-time limits and the evaluation cost limit."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from execauth.errors import PolicyInvalid
from execauth.policy.cost import (
    MAX_EXPRESSION_LENGTH,
    InputSize,
    estimated_cost,
    measure_input,
    scan_expression,
)
from execauth.policy.decision import Outcome, PolicyRef, Reason
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import CompiledBlock, compile_policy, evaluate

NOW = datetime(2026, 1, 7, 12, 0, tzinfo=UTC)
ORG = {"id": "org_test", "plan": "free"}
CUBIC = "payload.xs.all(a, payload.xs.all(b, payload.xs.all(c, a+b+c >= 0)))"


def _document(condition: str, effect: str = "deny") -> str:
    rule = {"id": "r", effect: condition}
    return json.dumps({"policy_id": "p", "surfaces": [{"match": "a.b", "rules": [rule]}]})


def _block(condition: str, *, publishing: bool = True) -> CompiledBlock:
    document = parse_policy_document(_document(condition))
    policy = compile_policy(
        document, PolicyRef("p", 1, document.policy_hash), publishing=publishing
    )
    return policy.blocks[0]


def _refusal(condition: str) -> str:
    with pytest.raises(PolicyInvalid) as info:
        _block(condition)
    return info.value.problems[0].reason


def _request(payload: dict[str, Any]) -> dict[str, Any]:
    return {"surface": "a.b", "action": None, "actor": None, "context": {}, "payload": payload}


@pytest.mark.parametrize(
    ("source", "depth"),
    [
        ("payload.x == 1", 0),
        ("payload.xs.all(a, a > 0)", 1),
        ("payload.xs.map(a, a).all(b, b > 0)", 1),  # a receiver is not nested in its macro
        ("payload.xs.all(a, payload.ys.exists(b, b == a))", 2),
        (CUBIC, 3),
        ('payload.s == "xs.all(a, ys.all(b, zs.all(c, true)))"', 0),
        ("payload.s == 'it''s'", 0),
        ('payload.s == """xs.all(a, "ys.all(b, true)")"""', 0),
        (r'payload.s == r"\" && xs.all(a, true)', 1),  # raw: the backslash does not escape
        ('payload.s == "\\" xs.all(a, true)"', 0),  # escaped quote stays inside the string
        ("payload.x == 1 // xs.all(a, ys.all(b, zs.all(c, true)))", 0),
        ("size(payload.xs) > 0 && payload.all == 1", 0),  # a field named all is no macro
    ],
)
def test_scanner_counts_comprehension_nesting(source: str, depth: int) -> None:
    assert scan_expression(source).depth == depth


def test_scanner_sees_calls_with_arguments_and_literals() -> None:
    shape = scan_expression('now.getHours("Europe/Paris") > 1 && payload.x in [1, 2, 3]')
    assert "getHours" in shape.calls_with_arguments
    assert shape.largest_literal == 3
    assert scan_expression("now.getHours() > 1").calls_with_arguments == ()


def test_triply_nested_comprehension_is_refused_at_publish() -> None:
    assert "nested 3 deep" in _refusal(CUBIC)


def test_expression_over_the_length_limit_is_refused_at_publish() -> None:
    condition = "payload.x == 1" + " || payload.x == 1" * (MAX_EXPRESSION_LENGTH // 18 + 1)
    assert len(condition) > MAX_EXPRESSION_LENGTH
    assert f"exceeds {MAX_EXPRESSION_LENGTH} characters" in _refusal(condition)


@pytest.mark.parametrize(
    "condition",
    ['now.getDayOfWeek("Europe/Paris") == 1', "getHours(now) > 8", 'now.getHours("UTC") > 8'],
)
def test_timestamp_accessors_with_an_argument_are_refused_at_publish(condition: str) -> None:
    reason = _refusal(condition)
    assert "with an argument is not supported" in reason
    assert "UTC" in reason


def test_timestamp_accessors_without_arguments_are_published() -> None:
    _block("now.getDayOfWeek() == 1 && (now + duration('1h')).getHours() > 8")


def test_stored_versions_skip_the_publish_limits_but_stay_bounded() -> None:
    block = _block(CUBIC, publishing=False)
    start = time.perf_counter()
    decision = evaluate(block, _request({"xs": list(range(200))}), now=NOW, org=ORG)
    assert time.perf_counter() - start < 0.5
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR


def test_depth_two_rule_over_a_huge_list_is_silence_quickly() -> None:
    block = _block("payload.xs.all(a, payload.xs.all(b, a + b >= 0))")
    start = time.perf_counter()
    decision = evaluate(block, _request({"xs": list(range(2000))}), now=NOW, org=ORG)
    assert time.perf_counter() - start < 0.2
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR
    assert decision.rule_id == "r"
    assert decision.message is not None
    assert "evaluation cost limit" in decision.message


def test_depth_two_rule_over_a_small_list_runs() -> None:
    block = _block("payload.xs.all(a, payload.xs.all(b, a + b >= 0))")
    decision = evaluate(block, _request({"xs": list(range(100))}), now=NOW, org=ORG)
    assert decision.outcome is Outcome.DENY


def test_rules_without_comprehensions_ignore_collection_sizes() -> None:
    block = _block("size(payload.xs) > 10")
    decision = evaluate(block, _request({"xs": list(range(20000))}), now=NOW, org=ORG)
    assert decision.outcome is Outcome.DENY


def test_map_and_filter_are_charged_for_copying() -> None:
    # map copies its growing result on every step: 300 copies of a 1,000-entry map took 28 s.
    plain = scan_expression("payload.xs.all(a, a > 0)")
    copying = scan_expression("payload.xs.map(a, payload.m).size() > 0")
    size = InputSize(largest=300, total=1300)
    assert estimated_cost(plain, size) == 300**2
    assert estimated_cost(copying, size) == 300**2 * 1300


def test_many_terms_in_a_comprehension_body_are_charged() -> None:
    terms = " + ".join(["payload.xs"] * 40)
    shape = scan_expression(f"payload.xs.all(a, a in ({terms}))")
    assert estimated_cost(shape, InputSize(10, 10)) == 10**2 * (41 // 4) ** 2


def test_measuring_the_input_is_iterative_and_skips_strings() -> None:
    deep: Any = []
    for _ in range(5000):  # deeper than Python's recursion limit
        deep = [deep]
    size = measure_input({"a": deep, "s": "x" * 60000, "xs": [1, 2, 3]})
    assert size.largest == 3
    assert size.total == 3 + 3 + 5000  # the map, xs, and each one-element wrapper


def test_normal_policies_are_unaffected() -> None:
    block = _block('payload.items.all(i, i.amount <= 100 && i.currency in ["EUR", "USD"])')
    items = [{"amount": 5, "currency": "EUR"}] * 200
    assert evaluate(block, _request({"items": items}), now=NOW, org=ORG).outcome is Outcome.DENY
