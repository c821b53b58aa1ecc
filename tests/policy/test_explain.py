"""Explain (execauth.policy.explain): the trace never disagrees with ``evaluate``."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from pathlib import Path

from execauth.policy.decision import PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import PolicySet, compile_policy
from execauth.policy.explain import UNGOVERNED, explain, explain_body
from execauth.policy.files import policy_files
from execauth.policy.testing import (
    INVALID_REQUEST,
    decide,
    load_cases,
    load_policies,
)

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"
NOW = datetime(2026, 1, 7, 12, 0, tzinfo=UTC)
ORG = {"id": "org_test", "plan": "free"}


def _set(text: str, policy_id: str = "p") -> PolicySet:
    document = parse_policy_document(textwrap.dedent(text), policy_id=policy_id)
    return PolicySet([compile_policy(document, PolicyRef(policy_id, 1, document.policy_hash))])


def _request(surface: str, **fields: object) -> dict[str, object]:
    return {
        "surface": surface,
        "action": None,
        "actor": None,
        "context": {},
        "payload": {},
    } | fields


def test_explain_agrees_with_evaluate_on_every_cookbook_case() -> None:
    policies, _ = load_policies(policy_files(COOKBOOK))
    checked = 0
    for path in sorted(COOKBOOK.glob("*.cases.yaml")):
        for case in load_cases(path):
            outcome, normalized = decide(policies, case.request, now=case.now, org=case.org)
            if outcome.decision == INVALID_REQUEST:
                continue
            assert normalized is not None
            explanation = explain(policies, normalized, now=case.now, org=case.org)
            assert explanation.outcome == outcome.decision, case.name
            if explanation.decision is not None:
                assert explanation.decision.rule_id == outcome.rule_id, case.name
                assert explanation.decision.reason == outcome.reason, case.name
                assert explanation.decision.ttl_seconds == outcome.ttl, case.name
            checked += 1
    assert checked >= 24


def test_explain_shows_every_block_and_which_won() -> None:
    policies = _set(
        """\
        surfaces:
          - {match: infra.**, rules: [{id: default-deny, deny: true}]}
          - {match: infra.dns.*, rules: [{id: dns, permit: 'actor == "netops"'}]}
          - {match: billing.*, rules: [{id: b, deny: true}]}
        """
    )
    answer = explain(policies, _request("infra.dns.zone", actor="netops"), now=NOW, org=ORG)
    blocks = answer.as_dict()["blocks"]
    assert [(b["match"], b["matched"], b["chosen"]) for b in blocks] == [
        ("infra.**", True, False),
        ("infra.dns.*", True, True),
        ("billing.*", False, False),
    ]
    assert "more specific" in blocks[0]["why"]
    assert answer.outcome == "PERMIT"
    assert answer.why == "only permit rules match: dns"


def test_explain_lists_require_paths_and_stops_at_the_first_error() -> None:
    policies = _set(
        """\
        surfaces:
          - match: a.b
            require: [actor, context.ticket]
            rules:
              - {id: first, permit: 'actor == "x"'}
              - {id: broken, deny: 'context.ticket > 3'}
              - {id: later, deny: 'false'}
        """
    )
    missing = explain(policies, _request("a.b", actor="x"), now=NOW, org=ORG).as_dict()
    assert missing["require"] == [
        {"path": "actor", "present": True},
        {"path": "context.ticket", "present": False},
    ]
    assert missing["rules"] == []
    assert missing["not_evaluated"] == ["first", "broken", "later"]

    request = _request("a.b", actor="x", context={"ticket": "CHG-1"})
    failed = explain(policies, request, now=NOW, org=ORG).as_dict()
    assert failed["decision"] == "SILENCE"
    assert [(r["id"], r["value"]) for r in failed["rules"]] == [("first", True), ("broken", None)]
    assert "could not be evaluated" in failed["rules"][1]["error"]
    assert failed["not_evaluated"] == ["later"]
    assert failed["why"] == "a condition failed"


def test_explain_of_an_ungoverned_surface() -> None:
    policies = _set("surfaces: [{match: a.b, rules: [{id: r, deny: true}]}]")
    answer = explain_body(policies, {"surface": "c.d"}, now=NOW, org=ORG)
    assert answer.outcome == UNGOVERNED
    assert answer.trace is None
    assert "404" in answer.why
