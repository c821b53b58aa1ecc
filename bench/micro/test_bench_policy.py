"""Policy evaluation and compilation with 1, 10, 100 and 1,000 rules per surface."""

from __future__ import annotations

from typing import Any

import cel
import pytest

from execauth.policy.cel_syntax import parse
from execauth.policy.decision import Outcome, PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import (
    CompiledBlock,
    CompiledPolicy,
    PolicySet,
    compile_policy,
    evaluate,
    trace,
)
from execauth.request import parse_execute_request

from .conftest import NOW, ORG_FACTS, policy_yaml

RULE_COUNTS = [1, 10, 100, 1000]


def compiled(rules: int) -> CompiledPolicy:
    document = parse_policy_document(policy_yaml(rules), policy_id="bench")
    return compile_policy(document, PolicyRef("bench", 1, document.policy_hash))


def block_and_request(rules: int, body: dict[str, Any]) -> tuple[CompiledBlock, dict[str, Any]]:
    """The ``deploy.production`` block of ``rules`` rules, and the wrk request normalized."""
    selected = PolicySet([compiled(rules)]).select("deploy.production")
    assert selected is not None
    return selected[1], parse_execute_request(body, None).evaluation_input()


@pytest.mark.parametrize("rules", RULE_COUNTS)
def test_evaluate(benchmark: Any, rules: int, body: dict[str, Any]) -> None:
    """``evaluate`` on the wrk request: every rule runs, the last one permits."""
    block, request = block_and_request(rules, body)
    decision = benchmark(evaluate, block, request, now=NOW, org=ORG_FACTS)
    assert decision.outcome is Outcome.PERMIT
    assert decision.rule_id == "release-from-main"


@pytest.mark.parametrize("rules", RULE_COUNTS)
def test_trace(benchmark: Any, rules: int, body: dict[str, Any]) -> None:
    """``trace``, what ``explain`` runs: ``evaluate``'s decision with every step recorded."""
    block, request = block_and_request(rules, body)
    recorded = benchmark(trace, block, request, now=NOW, org=ORG_FACTS)
    assert recorded.decision == evaluate(block, request, now=NOW, org=ORG_FACTS)
    assert len(recorded.rules) == rules


@pytest.mark.parametrize("rules", RULE_COUNTS)
def test_select_and_evaluate(benchmark: Any, rules: int, body: dict[str, Any]) -> None:
    """What the service does per request: pick the block for the surface, then evaluate."""
    policies = PolicySet([compiled(rules)])
    request = parse_execute_request(body, None).evaluation_input()

    def decide() -> Any:
        selected = policies.select("deploy.production")
        assert selected is not None
        return evaluate(selected[1], request, now=NOW, org=ORG_FACTS)

    assert benchmark(decide).outcome is Outcome.PERMIT


@pytest.mark.parametrize("rules", RULE_COUNTS)
def test_parse_and_compile(benchmark: Any, rules: int) -> None:
    """Publishing cost: parse the YAML document and compile every CEL expression."""
    text = policy_yaml(rules)

    def publish() -> CompiledPolicy:
        document = parse_policy_document(text, policy_id="bench")
        return compile_policy(document, PolicyRef("bench", 1, document.policy_hash))

    rounds = 3 if rules >= 1000 else 10
    # A published document is new text: no syntax tree of it is cached (cel_syntax.parse).
    setup = getattr(parse, "cache_clear", None)
    result = benchmark.pedantic(publish, setup=setup, rounds=rounds, iterations=1, warmup_rounds=1)
    assert len(result.blocks[0].rules) == rules


def _integers_in_place_of_strings(value: Any) -> Any:
    """``value`` with every string, map keys included, replaced by an integer."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return {
            index: _integers_in_place_of_strings(item) for index, item in enumerate(value.values())
        }
    if isinstance(value, list):
        return [_integers_in_place_of_strings(item) for item in value]
    return value


@pytest.mark.parametrize("values", ["request", "integers in place of strings"])
def test_cel_conversion(benchmark: Any, values: str, body: dict[str, Any]) -> None:
    """``cel.Context`` over the variables the 100-rule block reads, the largest part of
    ``evaluate`` (docs/performance.md, "The conversion round"). Beside the request, a copy
    of the same shape in integers: the ``cel`` package takes an integer at its third try
    (a map key at its first) and a string only at its ninth (a key at its fourth), so the
    difference of the two is what the failed tries cost."""
    block, request = block_and_request(100, body)
    variables = {
        name: value for name, value in request.items() if name not in block.unused_variables
    }
    if values != "request":
        variables = {
            name: _integers_in_place_of_strings(value) for name, value in variables.items()
        }
    context = benchmark(cel.Context, variables)
    assert context.variables == variables
