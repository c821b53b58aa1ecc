"""Impact reports (execauth.policy.replay.ImpactReport): decision changes vs rule changes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from execauth.policy.replay import (
    SAMPLES_PER_TRANSITION,
    ImpactReport,
    Outcome,
    RecordedExecution,
)

NOW = datetime(2026, 1, 7, 12, 0, tzinfo=UTC)
PERMIT = Outcome("PERMIT", "allow", None)
DENY_FREEZE = Outcome("DENY", "freeze", "SERVICE_POLICY_CHANGE_FREEZE")
DENY_BRANCH = Outcome("DENY", "not-main", "SERVICE_POLICY_WRONG_BRANCH")


def _recorded(execution_id: str, outcome: Outcome) -> RecordedExecution:
    return RecordedExecution(
        execution_id, outcome.decision, outcome.rule_id, outcome.reason, "deploys", 1,
        {"surface": "deploy.production"}, NOW, {"id": "org_x", "plan": "free"},
    )  # fmt: skip


def _report(*pairs: tuple[Outcome, Outcome]) -> dict[str, Any]:
    report = ImpactReport()
    for i, (before, after) in enumerate(pairs):
        report.add(_recorded(f"exec_{i}", before), after)
    return report.view()


def test_a_changed_decision_counts_as_changed() -> None:
    view = _report((PERMIT, DENY_FREEZE))
    assert (view["changed"], view["rule_changed"]) == (1, 0)
    (transition,) = view["transitions"]
    assert (transition["from"], transition["to"], transition["count"]) == ("PERMIT", "DENY", 1)


def test_a_decision_kept_by_another_rule_is_not_a_changed_decision() -> None:
    view = _report((DENY_BRANCH, DENY_FREEZE))
    assert (view["changed"], view["rule_changed"]) == (0, 1)
    assert view["transitions"] == []
    (change,) = view["rule_changes"]
    assert (change["decision"], change["count"]) == ("DENY", 1)
    assert change["samples"][0]["before"]["rule_id"] == "not-main"
    assert change["samples"][0]["after"]["rule_id"] == "freeze"


def test_rule_change_counts_leave_out_unchanged_executions_of_the_same_decision() -> None:
    view = _report(
        (DENY_BRANCH, DENY_FREEZE), (DENY_FREEZE, DENY_FREEZE), (DENY_BRANCH, DENY_BRANCH)
    )
    assert view["matrix"]["DENY"]["DENY"] == 3
    assert view["rule_changes"][0]["count"] == 1


def test_unchanged_executions_have_no_samples() -> None:
    view = _report((PERMIT, PERMIT), (DENY_FREEZE, DENY_FREEZE))
    assert (view["changed"], view["rule_changed"]) == (0, 0)
    assert view["transitions"] == view["rule_changes"] == []
    assert view["matrix"] == {"PERMIT": {"PERMIT": 1, "DENY": 0}, "DENY": {"PERMIT": 0, "DENY": 1}}


def test_samples_are_capped_but_counts_are_not() -> None:
    view = _report(*[(PERMIT, DENY_FREEZE)] * (SAMPLES_PER_TRANSITION + 3))
    (transition,) = view["transitions"]
    assert transition["count"] == view["changed"] == SAMPLES_PER_TRANSITION + 3
    assert len(transition["samples"]) == SAMPLES_PER_TRANSITION
