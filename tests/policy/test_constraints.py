"""Bound grants (docs/policy-language.md, "Constraints"): a permit or escalate rule's
``constraints`` and ``single_use``, checked at publish, bound at evaluation, signed into
the receipt; anything that cannot be bound is SILENCE, never a PERMIT without them."""

from __future__ import annotations

import base64
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from execauth.errors import PolicyInvalid
from execauth.policy.decision import Decision, Outcome, PolicyRef, Reason
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import CompiledBlock, PolicySet, compile_policy, evaluate, trace
from execauth.policy.explain import explain
from execauth.policy.testing import run_suite
from execauth.receipt_shape import check_receipt_shape
from execauth.receipts import build_outcome_receipt, build_receipt, sign_receipt
from execauth.request import parse_execute_request
from execauth.verify import key_id_for, verify_receipt

NOW = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)
ORG = {"id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz", "plan": "free"}
REQUEST: dict[str, Any] = {
    "surface": "payments.transfer",
    "actor": "agent-7",
    "context": {"limit": 500, "cur": "EUR"},
    "payload": {"amount": 120},
}


def _policy_text(rules: str) -> str:
    return "surfaces:\n  - match: payments.transfer\n    rules:\n" + textwrap.indent(
        textwrap.dedent(rules), "      "
    )


def _block(rules: str) -> CompiledBlock:
    document = parse_policy_document(_policy_text(rules), policy_id="p")
    return compile_policy(document, PolicyRef("p", 1, document.policy_hash)).blocks[0]


def _decide(rules: str, request: dict[str, Any] | None = None) -> Decision:
    block = _block(rules)
    request = request or REQUEST
    decision = evaluate(block, request, now=NOW, org=ORG)
    # The request path and the recorded path (explain, policy test) must agree.
    assert decision == trace(block, request, now=NOW, org=ORG).decision
    assert decision.constraints == trace(block, request, now=NOW, org=ORG).decision.constraints
    return decision


def _refusals(rules: str) -> list[str]:
    with pytest.raises(PolicyInvalid) as caught:
        _block(rules)
    return [p.reason for p in caught.value.problems]


# --- publish -------------------------------------------------------------------------------


def test_literal_constraints_are_bound_into_the_permit() -> None:
    decision = _decide(
        """\
        - id: pay
          permit: 'true'
          constraints: {max_amount: 500, currency: EUR, allowed_resources: [acct-1]}
        """
    )
    assert decision.outcome is Outcome.PERMIT
    assert decision.constraints == {
        "max_amount": 500,
        "currency": "EUR",
        "allowed_resources": ["acct-1"],
    }
    assert decision.single_use is False


def test_cel_constraints_are_computed_from_the_request() -> None:
    decision = _decide(
        """\
        - id: pay
          permit: 'true'
          constraints:
            max_amount: {cel: "context.limit"}
            currency: {cel: "context.cur"}
        """
    )
    assert decision.constraints == {"max_amount": 500, "currency": "EUR"}


def test_single_use_is_carried_by_the_permit() -> None:
    decision = _decide("- id: pay\n  permit: 'true'\n  single_use: true\n")
    assert decision.single_use is True
    assert decision.constraints is None


def test_an_unknown_constraint_name_is_refused_at_publish() -> None:
    reasons = _refusals("- id: pay\n  permit: 'true'\n  constraints: {max_amout: 5}\n")
    assert any("unknown constraint 'max_amout'" in r for r in reasons)


def test_an_organizations_own_constraint_starts_with_x() -> None:
    decision = _decide("- id: pay\n  permit: 'true'\n  constraints: {x_region: eu-west}\n")
    assert decision.constraints == {"x_region": "eu-west"}


def test_a_literal_of_the_wrong_kind_is_refused_at_publish() -> None:
    reasons = _refusals("- id: pay\n  permit: 'true'\n  constraints: {max_amount: lots}\n")
    assert any("max_amount must be a number >= 0" in r for r in reasons)


def test_a_malformed_currency_is_refused_at_publish() -> None:
    reasons = _refusals("- id: pay\n  permit: 'true'\n  constraints: {currency: euro}\n")
    assert any("ISO 4217" in r for r in reasons)


def test_allowed_commands_entries_are_program_names_or_argv_lists() -> None:
    reasons = _refusals(
        "- id: run\n  permit: 'true'\n  constraints: {allowed_commands: [git, [], 3]}\n"
    )
    assert any("allowed_commands must be a non-empty list" in r for r in reasons)


def test_allowed_tool_args_bounds_must_be_ordered_numbers() -> None:
    reasons = _refusals(
        "- id: t\n  permit: 'true'\n  constraints: {allowed_tool_args: {n: {min: 5, max: 1}}}\n"
    )
    assert any("min is greater than max" in r for r in reasons)


def test_an_oversized_literal_is_refused_at_publish() -> None:
    resources = ", ".join(f"resource-number-{i:04d}" for i in range(250))
    reasons = _refusals(
        f"- id: t\n  permit: 'true'\n  constraints: {{allowed_resources: [{resources}]}}\n"
    )
    assert any("more than 4096" in r for r in reasons)


def test_a_deny_rule_cannot_carry_constraints() -> None:
    reasons = _refusals("- id: stop\n  deny: 'true'\n  constraints: {max_amount: 1}\n")
    assert any("only permit and escalate rules have constraints" in r for r in reasons)


def test_single_use_must_be_a_boolean() -> None:
    reasons = _refusals("- id: pay\n  permit: 'true'\n  single_use: 'yes'\n")
    assert any("single_use must be true or false" in r for r in reasons)


def test_a_cel_constraint_with_an_unknown_name_is_refused_at_publish() -> None:
    reasons = _refusals(
        "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'contxt.limit'}}\n"
    )
    assert any("constraint max_amount: unknown name(s) 'contxt'" in r for r in reasons)


def test_a_cel_constraint_that_does_not_compile_is_refused_at_publish() -> None:
    reasons = _refusals(
        "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'context.limit +'}}\n"
    )
    assert any("constraint max_amount: CEL does not compile" in r for r in reasons)


def test_a_cel_constraint_with_an_unknown_function_is_refused_at_publish() -> None:
    reasons = _refusals(
        "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'ceil(context.limit)'}}\n"
    )
    assert any("unknown function(s) ceil" in r for r in reasons)


# --- evaluation: fail closed ---------------------------------------------------------------


def test_a_constraint_that_cannot_be_evaluated_is_silence() -> None:
    decision = _decide(
        "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'context.nope'}}\n"
    )
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR
    assert decision.rule_id == "pay"
    assert decision.constraints is None


def test_a_computed_value_of_the_wrong_kind_is_silence() -> None:
    decision = _decide(
        "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'context.cur'}}\n"
    )
    assert decision.outcome is Outcome.SILENCE
    assert "computed an invalid value" in (decision.message or "")


def test_a_computed_value_that_is_not_json_is_silence() -> None:
    decision = _decide("- id: pay\n  permit: 'true'\n  constraints: {x_when: {cel: 'now'}}\n")
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.EVALUATION_ERROR


def test_two_permit_rules_binding_one_constraint_differently_are_silence() -> None:
    decision = _decide(
        """\
        - id: small
          permit: 'true'
          constraints: {max_amount: 100}
        - id: large
          permit: 'true'
          constraints: {max_amount: 1000}
        """
    )
    assert decision.outcome is Outcome.SILENCE
    assert decision.reason == Reason.CONFLICT


def test_every_matching_permit_rules_constraints_are_bound() -> None:
    decision = _decide(
        """\
        - id: broad
          permit: 'true'
        - id: limited
          permit: 'true'
          constraints: {max_amount: 100}
          single_use: true
        """
    )
    assert decision.outcome is Outcome.PERMIT
    assert decision.rule_id == "broad"
    assert decision.constraints == {"max_amount": 100}
    assert decision.single_use is True


def test_a_rule_that_does_not_match_binds_nothing() -> None:
    decision = _decide(
        """\
        - id: ok
          permit: 'true'
        - id: never
          permit: 'false'
          constraints: {max_amount: 1}
        """
    )
    assert decision.outcome is Outcome.PERMIT
    assert decision.constraints is None


def test_a_deny_is_not_given_constraints() -> None:
    decision = _decide(
        "- id: stop\n  deny: 'true'\n- id: pay\n  permit: 'false'\n  constraints: {max_amount: 1}\n"
    )
    assert decision.outcome is Outcome.DENY
    assert decision.constraints is None


def test_an_escalate_carries_its_rules_constraints() -> None:
    decision = _decide(
        """\
        - id: ask
          escalate: 'true'
          constraints: {max_amount: {cel: "payload.amount"}}
          single_use: true
        """
    )
    assert decision.outcome is Outcome.ESCALATE
    assert decision.constraints == {"max_amount": 120}
    assert decision.single_use is True


# --- explain and policy test ---------------------------------------------------------------


def test_explain_shows_the_bound_grant() -> None:
    document = parse_policy_document(
        _policy_text("- id: pay\n  permit: 'true'\n  constraints: {max_amount: 5}\n"),
        policy_id="p",
    )
    policies = PolicySet([compile_policy(document, PolicyRef("p", 1, document.policy_hash))])
    answer = explain(policies, REQUEST, now=NOW, org=ORG).as_dict()
    assert answer["constraints"] == {"max_amount": 5}
    assert answer["single_use"] is False


def test_policy_test_cases_assert_constraints(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        _policy_text(
            "- id: pay\n  permit: 'true'\n  constraints: {max_amount: {cel: 'context.limit'}}\n"
        )
    )
    (tmp_path / "p.cases.yaml").write_text(
        textwrap.dedent(
            """\
            cases:
              - name: bound to the limit
                request: {surface: payments.transfer, context: {limit: 50}}
                expect: {decision: PERMIT, constraints: {max_amount: 50}, single_use: false}
              - name: wrong bound fails the case
                request: {surface: payments.transfer, context: {limit: 50}}
                expect: {decision: PERMIT, constraints: {max_amount: 60}}
            """
        )
    )
    report = run_suite(tmp_path)
    assert [r.passed for r in report.results] == [True, False]
    assert "constraints" in report.results[1].mismatches[0]


# --- the receipt ---------------------------------------------------------------------------


class _Signer:
    def __init__(self) -> None:
        self.private = Ed25519PrivateKey.generate()
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key_id = key_id_for(raw)
        self.key_document = {
            "key_id": self.key_id,
            "algorithm": "Ed25519",
            "public_key": base64.b64encode(
                self.private.public_key().public_bytes(
                    Encoding.DER, PublicFormat.SubjectPublicKeyInfo
                )
            ).decode(),
            "created_at": "2026-01-01T00:00:00Z",
            "status": "active",
        }

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def _receipt(rules: str, signer: _Signer) -> dict[str, Any]:
    decision = _decide(rules)
    unsigned = build_receipt(
        receipt_id="service_rcpt_0123456789abcdef",
        execution_id="service_exec_01HZZZZZZZZZZZZZZZZZZZZZZZ",
        request=parse_execute_request(REQUEST, None),
        decision=decision,
        policy=PolicyRef("p", 1, "sha256:" + "0" * 64),
        org_id=ORG["id"],
        issuer="https://execauth.test",
        now=NOW,
        key_id=signer.key_id,
    )
    return sign_receipt(unsigned, signer)[0]


def _verify(receipt: dict[str, Any], signer: _Signer) -> Any:
    from execauth.verify import parse_key_list

    keys, _ = parse_key_list({"keys": [signer.key_document]})
    return verify_receipt(receipt, keys, now=NOW)


PAY = "- id: pay\n  permit: 'true'\n  constraints: {max_amount: 500}\n  single_use: true\n"


def test_the_permit_receipt_signs_constraints_and_single_use() -> None:
    signer = _Signer()
    receipt = _receipt(PAY, signer)
    assert receipt["constraints"] == {"max_amount": 500}
    assert receipt["single_use"] is True
    verdict = _verify(receipt, signer)
    assert verdict.authentic
    assert verdict.constraints == {"max_amount": 500}
    assert verdict.single_use is True
    assert check_receipt_shape(receipt, strict=True).valid


def test_a_permit_without_a_grant_omits_both_fields() -> None:
    receipt = _receipt("- id: pay\n  permit: 'true'\n", _Signer())
    assert "constraints" not in receipt
    assert "single_use" not in receipt


def test_raising_a_signed_constraint_breaks_the_signature() -> None:
    signer = _Signer()
    receipt = _receipt(PAY, signer)
    receipt["constraints"] = {"max_amount": 5000}
    assert _verify(receipt, signer).reason == "bad_signature"


def test_dropping_single_use_breaks_the_signature() -> None:
    signer = _Signer()
    receipt = _receipt(PAY, signer)
    del receipt["single_use"]
    assert _verify(receipt, signer).reason == "bad_signature"


def test_the_shape_check_refuses_constraints_on_a_deny() -> None:
    verdict = check_receipt_shape(
        {"decision": "DENY", "timestamp": "2026-03-14T12:00:00Z", "constraints": {"a": 1}}
    )
    assert any("carries no constraints" in e for e in verdict.errors)


def test_the_shape_check_refuses_single_use_false() -> None:
    verdict = check_receipt_shape(
        {
            "decision": "PERMIT",
            "timestamp": "2026-03-14T12:00:00Z",
            "expires_at": "2026-03-14T12:15:00Z",
            "single_use": False,
        }
    )
    assert "single_use must be true (omitted when false)" in verdict.errors


def test_an_approved_escalate_becomes_a_permit_with_its_grant() -> None:
    signer = _Signer()
    escalation = _receipt(
        "- id: ask\n  escalate: 'true'\n  constraints: {max_amount: 7}\n  single_use: true\n",
        signer,
    )
    assert escalation["constraints"] == {"max_amount": 7}
    permit = build_outcome_receipt(
        escalation,
        receipt_id="service_rcpt_fedcba9876543210",
        execution_id="service_exec_01HZZZZZZZZZZZZZZZZZZZZZZY",
        outcome="approved",
        approvers=[{"key_id": "key_01hzzzzzzzzzzzzzzzzzzzzzzz", "vote": "approve"}],
        now=NOW,
        permit_ttl_seconds=60,
        key_id=signer.key_id,
    )
    assert permit["decision"] == "PERMIT"
    assert permit["constraints"] == {"max_amount": 7}
    assert permit["single_use"] is True


def test_a_rejected_escalate_carries_no_grant() -> None:
    signer = _Signer()
    escalation = _receipt("- id: ask\n  escalate: 'true'\n  constraints: {max_amount: 7}\n", signer)
    deny = build_outcome_receipt(
        escalation,
        receipt_id="service_rcpt_fedcba9876543210",
        execution_id="service_exec_01HZZZZZZZZZZZZZZZZZZZZZZY",
        outcome="rejected",
        approvers=[],
        now=NOW,
        permit_ttl_seconds=60,
        key_id=signer.key_id,
    )
    assert "constraints" not in deny
    assert check_receipt_shape(deny).valid


# --- execauth gate's rule (execauth.verify.command_outside_grant) ---------------------------


def test_a_program_name_entry_matches_argv0_exactly_and_nothing_resolved() -> None:
    from execauth.verify import command_outside_grant

    receipt = {"constraints": {"allowed_commands": ["git"]}}
    assert command_outside_grant(receipt, ["git", "push"]) is None
    assert command_outside_grant(receipt, ["/usr/bin/git", "push"]) is not None


def test_an_argv_entry_matches_only_the_whole_argv() -> None:
    from execauth.verify import command_outside_grant

    receipt = {"constraints": {"allowed_commands": [["make", "deploy"]]}}
    assert command_outside_grant(receipt, ["make", "deploy"]) is None
    assert command_outside_grant(receipt, ["make", "deploy", "all"]) is not None


def test_a_permit_without_allowed_commands_binds_no_command() -> None:
    from execauth.verify import command_outside_grant

    assert command_outside_grant({"constraints": {"max_amount": 5}}, ["rm"]) is None
    assert command_outside_grant({}, ["rm"]) is None
