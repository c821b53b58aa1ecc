"""A typo must not ship: names the evaluator does not define are refused at publish."""

from __future__ import annotations

import pytest

from execauth.errors import PolicyInvalid
from execauth.policy.decision import PolicyRef
from execauth.policy.document import parse_policy_document
from execauth.policy.engine import compile_policy
from execauth.policy.names import unknown_names

TYPO = """
surfaces:
  - match: deploy.production
    rules:
      - id: from-main
        permit: contxt.branch == "main"
"""


def names(source: str) -> list[str]:
    return [unknown.name for unknown in unknown_names(source)]


def publish(text: str, *, publishing: bool = True) -> PolicyInvalid | None:
    document = parse_policy_document(text, policy_id="deploys")
    try:
        compile_policy(
            document, PolicyRef("deploys", 1, document.policy_hash), publishing=publishing
        )
    except PolicyInvalid as exc:
        return exc
    return None


def test_misspelled_variable_is_refused_naming_the_rule_the_line_and_the_name() -> None:
    refused = publish(TYPO)
    assert refused is not None
    (problem,) = refused.problems
    assert (problem.rule_id, problem.line) == ("from-main", 6)
    assert "'contxt'" in problem.reason
    assert "did you mean 'context'" in problem.reason


def test_stored_version_with_an_unknown_name_still_loads() -> None:
    assert publish(TYPO, publishing=False) is None


@pytest.mark.parametrize("variable", ["surface", "action", "actor", "context", "payload", "now"])
def test_every_evaluator_variable_is_defined(variable: str) -> None:
    assert names(f"{variable} != null") == []


def test_type_names_are_defined() -> None:
    assert names("type(context.n) == int && type(actor) == string && type(null) == null_type") == []


def test_comprehension_variable_is_defined_inside_its_macro() -> None:
    assert names('payload.argv.exists(a, a in ["push", "reset"])') == []


def test_comprehension_variable_is_unknown_outside_its_macro() -> None:
    assert names("payload.xs.exists(a, a == 1) && a == 2") == ["a"]


def test_comprehension_variable_is_unknown_in_its_own_receiver() -> None:
    assert names("a.all(a, a > 0)") == ["a"]


def test_unknown_org_field_is_refused_with_a_suggestion() -> None:
    (unknown,) = unknown_names('org.pln == "free"')
    assert (unknown.name, unknown.suggestion) == ("org.pln", "org.plan")


def test_org_fields_are_defined_by_select_and_by_index() -> None:
    assert names('org.id != "" && org["plan"] == "free" && has(org.plan)') == []


def test_each_unknown_name_is_reported_once_in_order() -> None:
    assert names("zeta == 1 && alpha == 2 && zeta == 3") == ["zeta", "alpha"]


def test_unknown_function_is_still_refused() -> None:
    refused = publish(TYPO.replace('contxt.branch == "main"', 'lowerAscii(actor) == "x"'))
    assert refused is not None
    assert "unknown function(s) lowerAscii" in refused.problems[0].reason


def test_misspelled_function_is_refused_with_a_suggestion() -> None:
    refused = publish(TYPO.replace('contxt.branch == "main"', 'actor.startWith("release-")'))
    assert refused is not None
    assert "startWith (did you mean 'startsWith'?)" in refused.problems[0].reason
