"""Policy evaluation (execauth.policy.engine): the decision table of docs/policy-language.md."""

from __future__ import annotations

import dataclasses
import textwrap
from datetime import UTC, date, datetime
from typing import Any

import pytest

from execauth.errors import PolicyInvalid
from execauth.policy.decision import (
    DEFAULT_PERMIT_TTL_SECONDS,
    Decision,
    Outcome,
    PolicyRef,
    Reason,
)
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import (
    MAX_KEPT_SELECTIONS,
    CompiledBlock,
    CompiledPolicy,
    PolicySet,
    compile_policy,
    evaluate,
)
from execauth.request import parse_execute_request

NOW = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)  # a Saturday
ORG = {"id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "plan": "free"}


def _compile(text: str, policy_id: str = "p") -> CompiledPolicy:
    document = parse_policy_document(textwrap.dedent(text), policy_id=policy_id)
    return compile_policy(document, PolicyRef(policy_id, 1, document.policy_hash))


def _block(rules: str, *, require: str | None = None) -> CompiledBlock:
    """A single block for ``deploy.production`` with the given YAML rules list."""
    lines = ["surfaces:", "  - match: deploy.production"]
    if require is not None:
        lines.append(f"    require: {require}")
    lines.append("    rules:")
    lines.append(textwrap.indent(textwrap.dedent(rules), "      "))
    return _compile("\n".join(lines) + "\n").blocks[0]


def _decide(block: CompiledBlock, **body: Any) -> Decision:
    request = parse_execute_request({"surface": "deploy.production", **body}, None)
    return evaluate(block, request.evaluation_input(), now=NOW, org=ORG)


# --- the decision table ----------------------------------------------------------------------


def test_surface_matched_by_no_block_selects_nothing() -> None:
    policies = PolicySet([_compile("surfaces:\n  - match: deploy.*\n    rules:\n"
                                   "      - {id: r, permit: 'true'}\n")])  # fmt: skip
    assert policies.select("data.export") is None
    assert policies.select("deploy.production.eu") is None


def test_no_active_policy_selects_nothing() -> None:
    assert PolicySet([]).select("deploy.production") is None


def test_missing_required_context_is_silence_missing_context() -> None:
    block = _block("- {id: r, permit: 'true'}\n", require="[context.branch]")
    decision = _decide(block, context={"environment": "prod"})
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.MISSING_CONTEXT == "SERVICE_POLICY_MISSING_CONTEXT"
    assert decision.rule_id is None
    assert "context.branch" in (decision.message or "")


def test_required_field_that_is_null_counts_as_missing() -> None:
    block = _block("- {id: r, permit: 'true'}\n", require="[context.branch]")
    assert _decide(block, context={"branch": None}).reason == Reason.MISSING_CONTEXT


def test_missing_nested_required_path_is_silence() -> None:
    block = _block("- {id: r, permit: 'true'}\n", require="[payload.amount.value]")
    assert _decide(block, payload={"amount": 5}).outcome is Outcome.SILENCE


@pytest.mark.parametrize("path", ["actor", "action"])
def test_missing_required_actor_or_action_is_silence(path: str) -> None:
    block = _block("- {id: r, permit: 'true'}\n", require=f"[{path}]")
    assert _decide(block).reason == Reason.MISSING_CONTEXT


def test_present_required_fields_let_rules_decide() -> None:
    block = _block(
        "- {id: r, permit: 'true'}\n", require="[actor, context.branch, payload.amount.value]"
    )
    decision = _decide(
        block, actor="a", context={"branch": "main"}, payload={"amount": {"value": 0}}
    )
    assert decision.outcome is Outcome.PERMIT


def test_condition_on_a_missing_field_is_silence_evaluation_error() -> None:
    block = _block("- {id: needs-branch, permit: 'context.branch == \"main\"'}\n")
    decision = _decide(block, context={})
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR == "SERVICE_POLICY_EVALUATION_ERROR"
    assert decision.rule_id == "needs-branch"


def test_condition_on_a_wrong_type_is_silence_evaluation_error() -> None:
    block = _block("- {id: big, deny: 'payload.amount > 10'}\n")
    decision = _decide(block, payload={"amount": "eleven"})
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR


def test_evaluation_error_is_never_permit_even_when_another_permit_matches() -> None:
    block = _block(
        """\
        - {id: always, permit: 'true'}
        - {id: broken, permit: 'context.missing == 1'}
        """
    )
    decision = _decide(block)
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR
    assert decision.ttl_seconds is None


def test_condition_that_is_not_boolean_is_silence_evaluation_error() -> None:
    block = _block("- {id: number, permit: 'payload.amount'}\n")
    decision = _decide(block, payload={"amount": 1})
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR
    assert decision.rule_id == "number"


def test_permit_and_deny_both_matching_is_silence_conflict() -> None:
    block = _block(
        """\
        - {id: allow, permit: 'true'}
        - {id: block, deny: 'true', reason: SERVICE_POLICY_FROZEN}
        """
    )
    decision = _decide(block)
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.CONFLICT == "SERVICE_POLICY_CONFLICT"
    assert decision.ttl_seconds is None


def test_matching_deny_without_matching_permit_is_deny_with_the_rules_reason() -> None:
    block = _block(
        """\
        - {id: main-only, permit: 'context.branch == "main"'}
        - {id: wrong-branch, deny: 'context.branch != "main"',
           reason: SERVICE_POLICY_WRONG_BRANCH, message: Only main can be deployed}
        """
    )
    decision = _decide(block, context={"branch": "dev"})
    assert decision.outcome is Outcome.DENY
    assert decision.rule_id == "wrong-branch"
    assert decision.reason == "SERVICE_POLICY_WRONG_BRANCH"
    assert decision.message == "Only main can be deployed"
    assert decision.ttl_seconds is None


def test_several_matching_denies_report_the_first_in_document_order() -> None:
    block = _block(
        """\
        - {id: first, deny: 'true', reason: SERVICE_POLICY_FIRST}
        - {id: second, deny: 'true', reason: SERVICE_POLICY_SECOND}
        """
    )
    decision = _decide(block)
    assert (decision.rule_id, decision.reason) == ("first", "SERVICE_POLICY_FIRST")


def test_deny_without_a_reason_uses_service_policy_denied() -> None:
    decision = _decide(_block("- {id: nope, deny: 'true'}\n"))
    assert decision.outcome is Outcome.DENY
    assert decision.reason == Reason.DENIED == "SERVICE_POLICY_DENIED"
    assert decision.message


def test_matching_permit_without_matching_deny_is_permit() -> None:
    block = _block(
        """\
        - {id: main-only, permit: 'context.branch == "main"', ttl: 10m}
        - {id: wrong-branch, deny: 'context.branch != "main"'}
        """
    )
    decision = _decide(block, context={"branch": "main"})
    assert decision.outcome is Outcome.PERMIT
    assert decision.rule_id == "main-only"
    assert decision.reason is None
    assert decision.message is None
    assert decision.ttl_seconds == 600


def test_permit_ttl_is_the_smallest_of_the_matching_permits() -> None:
    block = _block(
        """\
        - {id: long, permit: 'true', ttl: 1h}
        - {id: short, permit: 'true', ttl: 90s}
        - {id: unmatched, permit: 'false', ttl: 1s}
        """
    )
    assert _decide(block).ttl_seconds == 90


def test_permit_without_ttl_lasts_15_minutes() -> None:
    decision = _decide(_block("- {id: r, permit: 'true'}\n"))
    assert decision.ttl_seconds == DEFAULT_PERMIT_TTL_SECONDS == 15 * 60


def test_a_single_permits_ttl_is_its_own() -> None:
    assert _decide(_block("- {id: r, permit: 'true', ttl: 2m}\n")).ttl_seconds == 120


def test_a_rule_whose_effect_the_table_does_not_know_is_never_a_permit() -> None:
    # The document parser admits none; the decision built at compile time fails closed.
    rule = _block("- {id: r, permit: 'true'}\n").rules[0]
    unknown = dataclasses.replace(rule, effect="allow")
    assert unknown.alone.outcome is Outcome.SILENCE
    assert rule.alone.outcome is Outcome.PERMIT


def test_no_matching_rule_is_deny_no_matching_rule() -> None:
    block = _block(
        """\
        - {id: a, permit: 'false'}
        - {id: b, deny: 'false'}
        """
    )
    decision = _decide(block)
    assert decision.outcome is Outcome.DENY
    assert decision.reason == Reason.NO_MATCHING_RULE == "SERVICE_POLICY_NO_MATCHING_RULE"
    assert decision.rule_id is None


@pytest.mark.parametrize(
    ("outcome", "enforcement", "category"),
    [
        (Outcome.PERMIT, "EXECUTED", None),
        (Outcome.DENY, "BLOCKED", "POLICY_VIOLATION"),
        (Outcome.SILENCE, "BLOCKED", "INDETERMINATE_EVALUATION"),
    ],
)
def test_decision_maps_to_enforcement_and_reason_category(
    outcome: Outcome, enforcement: str, category: str | None
) -> None:
    decision = Decision(outcome, None, None, None)
    assert decision.enforcement == enforcement
    assert decision.reason_category == category


# --- CEL variables ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "condition",
    [
        'surface == "deploy.production"',
        'action == "rollout"',
        'actor.startsWith("release-")',
        'context.branch == "main"',
        "payload.amount == 10",
        'now == timestamp("2026-03-14T12:00:00Z")',
        "now.getDayOfWeek() == 6",
        'org.plan == "free"',
        'org.id.startsWith("org_")',
    ],
)
def test_policy_sees_every_documented_variable(condition: str) -> None:
    block = _block(f"- id: r\n  permit: '{condition}'\n")
    decision = _decide(
        block,
        action="rollout",
        actor="release-bot",
        context={"branch": "main"},
        payload={"amount": 10},
    )
    assert decision.outcome is Outcome.PERMIT, decision


def test_the_variables_no_rule_reads_are_known_at_compile_time() -> None:
    block = _block("- {id: r, permit: 'context.branch == \"main\" && now.getHours() > 1'}\n")
    assert block.unused_variables == {"surface", "action", "actor", "payload", "org"}


@pytest.mark.parametrize(
    ("variable", "value"),
    [("action", "\ud800"), ("payload", {"when": date(2026, 3, 14)}), ("actor", 10**400)],
    ids=["lone-surrogate", "date", "beyond-double"],
)
def test_a_value_cel_cannot_hold_is_silence_even_where_no_rule_reads_it(
    variable: str, value: Any
) -> None:
    # Only what certainly converts is left out of the activation: the request fails whole,
    # naming the variable, whether or not a rule reads it.
    request = {"surface": "deploy.production", "context": {}, "payload": {}, variable: value}
    ignores = _block("- {id: r, permit: 'true'}\n")
    reads = _block(f"- {{id: r, permit: '{variable} != null'}}\n")
    decision = evaluate(ignores, request, now=NOW, org=ORG)
    assert decision == evaluate(reads, request, now=NOW, org=ORG)
    assert (decision.outcome, decision.reason, decision.rule_id) == (
        Outcome.SILENCE, Reason.EVALUATION_ERROR, None,
    )  # fmt: skip
    assert f"variable '{variable}'" in (decision.message or "")


def test_metadata_is_seen_as_context() -> None:
    block = _block("- {id: r, permit: 'context.branch == \"main\"'}\n")
    assert _decide(block, metadata={"branch": "main"}).outcome is Outcome.PERMIT


def test_evaluation_is_deterministic_for_replay() -> None:
    block = _block(
        """\
        - {id: weekend, deny: 'now.getDayOfWeek() == 6', reason: SERVICE_POLICY_WEEKEND}
        - {id: r, permit: 'true'}
        """
    )
    assert _decide(block) == _decide(block)


# --- block selection -------------------------------------------------------------------------

_SELECTION = """\
surfaces:
  - match: deploy.**
    rules: [{id: any-depth, permit: 'true'}]
  - match: deploy.*
    rules: [{id: one-segment, permit: 'true'}]
  - match: deploy.prod-*
    rules: [{id: prod-family, permit: 'true'}]
  - match: deploy.prod-eu
    rules: [{id: exact, permit: 'true'}]
"""


@pytest.mark.parametrize(
    ("surface", "rule_id"),
    [
        ("deploy.prod-eu", "exact"),
        ("deploy.prod-us", "prod-family"),
        ("deploy.staging", "any-depth"),  # `**` and `*` tie on literal text: document order
        ("deploy.staging.eu", "any-depth"),
    ],
)
def test_most_specific_surface_block_is_selected(surface: str, rule_id: str) -> None:
    selected = PolicySet([_compile(_SELECTION)]).select(surface)
    assert selected is not None
    assert selected[1].rules[0].id == rule_id


def test_a_kept_selection_answers_as_the_first_did() -> None:
    policies = PolicySet([_compile(_SELECTION)])
    surfaces = ["deploy.prod-eu", "deploy.staging", "nothing.here"] * 2
    chosen = [policies.select(surface) for surface in surfaces]
    assert chosen[:3] == chosen[3:]
    assert chosen[2] is None


def test_a_client_choosing_many_surfaces_keeps_at_most_the_bound_of_selections() -> None:
    policies = PolicySet([_compile(_SELECTION)])
    for n in range(MAX_KEPT_SELECTIONS + 10):
        policies.select(f"deploy.client-{n}")
    assert len(policies._selections) <= MAX_KEPT_SELECTIONS
    selected = policies.select("deploy.prod-eu")
    assert selected is not None
    assert selected[1].rules[0].id == "exact"


def test_exact_match_wins_over_a_pattern_with_more_literal_text() -> None:
    policy = _compile(
        """\
        surfaces:
          - match: data.export-*-large
            rules: [{id: pattern, permit: 'true'}]
          - match: data.export-x-large
            rules: [{id: exact, permit: 'true'}]
          - match: a.b
            rules: [{id: other, permit: 'true'}]
        """
    )
    selected = PolicySet([policy]).select("data.export-x-large")
    assert selected is not None
    assert selected[1].rules[0].id == "exact"


def test_equally_specific_blocks_in_two_policies_go_to_the_lowest_policy_id() -> None:
    text = "surfaces:\n  - match: deploy.production\n    rules: [{id: r, permit: 'true'}]\n"
    policies = PolicySet([_compile(text, "zeta"), _compile(text, "alpha")])
    selected = policies.select("deploy.production")
    assert selected is not None
    assert selected[0].ref.policy_id == "alpha"


def test_selection_returns_the_policy_that_owns_the_block() -> None:
    deploys = _compile("surfaces:\n  - match: deploy.*\n    rules: [{id: d, permit: 'true'}]\n",
                       "deploys")  # fmt: skip
    exports = _compile("surfaces:\n  - match: data.*\n    rules: [{id: e, deny: 'true'}]\n",
                       "exports")  # fmt: skip
    selected = PolicySet([deploys, exports]).select("data.export")
    assert selected is not None
    policy, block = selected
    assert policy.ref.policy_id == "exports"
    assert block.rules[0].id == "e"


# --- compilation -----------------------------------------------------------------------------


def test_expression_that_does_not_compile_is_refused_with_rule_and_line() -> None:
    text = """\
        surfaces:
          - match: deploy.production
            rules:
              - id: fine
                permit: 'true'
              - id: broken
                deny: 'context.branch =='
        """
    with pytest.raises(PolicyInvalid) as caught:
        _compile(text)
    (problem,) = caught.value.problems
    assert problem.rule_id == "broken"
    assert problem.path == "surfaces[0].rules[1].deny"
    assert problem.line == 7
    assert "CEL does not compile" in problem.reason


def test_unknown_function_is_refused_at_publish_time() -> None:
    with pytest.raises(PolicyInvalid) as caught:
        _block("- {id: r, permit: 'context.branch.lowerAscii() == \"main\"'}\n")
    (problem,) = caught.value.problems
    assert "lowerAscii" in problem.reason
    assert problem.rule_id == "r"


def test_every_expression_that_does_not_compile_is_reported() -> None:
    with pytest.raises(PolicyInvalid) as caught:
        _block(
            """\
            - {id: a, permit: '(('}
            - {id: b, deny: '1 +'}
            """
        )
    assert [p.rule_id for p in caught.value.problems] == ["a", "b"]


@pytest.mark.parametrize(
    "condition",
    [
        "has(context.branch)",
        '[1, 2].exists(x, x > 1) && context.branch in ["main"]',
        'size(actor) > 0 && actor.matches("^r") && actor.endsWith("bot")',
        'now - duration("1h") < now',
    ],
)
def test_documented_functions_and_macros_compile(condition: str) -> None:
    block = _block(f"- id: r\n  permit: '{condition}'\n")
    assert block.rules[0].source == condition
