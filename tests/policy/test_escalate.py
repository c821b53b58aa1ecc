"""Escalate rules (docs/approvals.md): their shape, their defaults and their precedence."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from execauth.errors import PolicyInvalid
from execauth.policy.decision import Escalation, Outcome, PolicyRef, Reason
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import CompiledBlock, PolicySet, compile_policy, evaluate, trace
from execauth.policy.explain import explain
from execauth.policy.replay import RecordedExecution, impact
from execauth.policy.testing import run_suite

NOW = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)
ORG = {"id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "plan": "free"}
REQUEST = {"surface": "deploy.production", "actor": "alice", "context": {}, "payload": {}}


def _block(rules: str) -> CompiledBlock:
    text = "surfaces:\n  - match: deploy.production\n    rules:\n" + textwrap.indent(
        textwrap.dedent(rules), "      "
    )
    document = parse_policy_document(text, policy_id="p")
    return compile_policy(document, PolicyRef("p", 1, document.policy_hash)).blocks[0]


def _decide(rules: str) -> tuple[Outcome, str | None]:
    decision = evaluate(_block(rules), REQUEST, now=NOW, org=ORG)
    assert decision == trace(_block(rules), REQUEST, now=NOW, org=ORG).decision
    return decision.outcome, decision.rule_id


def test_bare_escalate_takes_the_documented_defaults() -> None:
    decision = evaluate(_block("- id: ask\n  escalate: 'true'\n"), REQUEST, now=NOW, org=ORG)
    assert decision.outcome is Outcome.ESCALATE
    assert decision.reason == Reason.APPROVAL_REQUIRED
    assert decision.escalation == Escalation(("admin",), (), 1, 3600, 15 * 60)


def test_escalate_reads_approvers_quorum_and_both_ttls() -> None:
    rules = """\
        - id: ask
          escalate: 'true'
          approvers: {roles: [auditor], keys: [key_01hzzzzzzzzzzzzzzzzzzzzzzz]}
          quorum: 2
          approval_ttl: 30m
          ttl: 5m
        """
    decision = evaluate(_block(rules), REQUEST, now=NOW, org=ORG)
    assert decision.escalation == Escalation(
        ("auditor",), ("key_01hzzzzzzzzzzzzzzzzzzzzzzz",), 2, 1800, 300
    )


def test_escalate_without_a_match_is_not_an_escalation() -> None:
    assert _decide("- id: ask\n  escalate: 'false'\n- id: ok\n  permit: 'true'\n") == (
        Outcome.PERMIT,
        "ok",
    )


def test_escalate_wins_over_a_matching_permit() -> None:
    rules = "- id: ok\n  permit: 'true'\n- id: ask\n  escalate: 'true'\n"
    assert _decide(rules) == (Outcome.ESCALATE, "ask")


def test_a_matching_deny_wins_over_escalate() -> None:
    rules = "- id: ask\n  escalate: 'true'\n- id: stop\n  deny: 'true'\n"
    assert _decide(rules) == (Outcome.DENY, "stop")


def test_permit_and_deny_with_escalate_stay_a_conflict() -> None:
    rules = (
        "- id: ask\n  escalate: 'true'\n- id: ok\n  permit: 'true'\n- id: stop\n  deny: 'true'\n"
    )
    outcome, _ = _decide(rules)
    assert outcome is Outcome.SILENCE


def test_an_escalate_condition_that_fails_is_silence() -> None:
    outcome, _ = _decide("- id: ask\n  escalate: context.missing.deeper == 1\n")
    assert outcome is Outcome.SILENCE


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("quorum: 0", "quorum must be an integer"),
        ("quorum: true", "quorum must be an integer"),
        ("approval_ttl: 2d", "ttl"),
        ("approvers: {roles: [owner]}", "unknown role"),
        ("approvers: {keys: [alice]}", "not an API key id"),
        ("approvers: {roles: []}", "names no role and no key"),
        ("approvers: {keys: [key_01hzzzzzzzzzzzzzzzzzzzzzzz]}\n  quorum: 2", "exceeds"),
    ],
)
def test_bad_escalation_settings_are_refused(extra: str, needle: str) -> None:
    with pytest.raises(PolicyInvalid) as raised:
        _block(f"- id: ask\n  escalate: 'true'\n  {extra}\n")
    assert any(needle in p.reason for p in raised.value.problems), raised.value.problems


@pytest.mark.parametrize("field", ["approvers: {roles: [admin]}", "quorum: 2", "approval_ttl: 1h"])
def test_escalation_settings_on_a_permit_rule_are_refused(field: str) -> None:
    with pytest.raises(PolicyInvalid) as raised:
        _block(f"- id: ok\n  permit: 'true'\n  {field}\n")
    assert "only escalate rules" in raised.value.problems[0].reason


def _set(rules: str) -> PolicySet:
    text = "surfaces:\n  - match: deploy.production\n    rules:\n" + textwrap.indent(
        textwrap.dedent(rules), "      "
    )
    document = parse_policy_document(text, policy_id="p")
    return PolicySet([compile_policy(document, PolicyRef("p", 2, document.policy_hash))])


def test_explain_names_the_escalate_row() -> None:
    answer = explain(_set("- id: ask\n  escalate: 'true'\n"), REQUEST, now=NOW, org=ORG)
    assert answer.outcome == "ESCALATE"
    assert answer.trace is not None
    assert answer.trace.row == "escalate rules match (no deny)"


def test_a_policy_test_case_can_expect_escalate(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "surfaces:\n  - match: deploy.production\n    rules:\n"
        "      - id: ask\n        escalate: 'true'\n"
    )
    (tmp_path / "p.cases.yaml").write_text(
        "cases:\n  - name: asks\n    request: {surface: deploy.production}\n"
        "    expect: {decision: ESCALATE, rule_id: ask}\n"
    )
    report = run_suite(tmp_path)
    assert (report.passed, report.failed) == (1, 0)


def test_impact_counts_a_permit_that_becomes_an_escalate() -> None:
    recorded = RecordedExecution("service_exec_x", "PERMIT", "ok", None, "p", 1, REQUEST, NOW, ORG)
    report = impact(_set("- id: ask\n  escalate: 'true'\n"), [recorded])
    assert report.matrix[("PERMIT", "ESCALATE")] == 1
    assert report.changed == 1
