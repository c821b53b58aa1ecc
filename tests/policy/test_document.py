"""The policy document (execauth.policy.document): parsing, validation with lines, policy_hash."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import textwrap
from typing import Any

import pytest
import rfc8785

from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy.document import (
    MAX_TTL_SECONDS,
    BlockSpec,
    PolicyDocument,
    parse_duration,
    parse_policy_document,
)

YAML_POLICY = """\
policy_id: deploys
description: Production deploys
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main"
        ttl: 10m
      - id: wrong-branch
        deny: context.branch != "main"
        reason: SERVICE_POLICY_WRONG_BRANCH
        message: Only main can be deployed
  - match: deploy.*
    rules:
      - id: anyone
        permit: "true"
"""

JSON_DATA: dict[str, Any] = {
    "policy_id": "deploys",
    "description": "Production deploys",
    "surfaces": [
        {
            "match": "deploy.production",
            "require": ["context.branch"],
            "rules": [
                {"id": "main-only", "permit": 'context.branch == "main"', "ttl": "10m"},
                {
                    "id": "wrong-branch",
                    "deny": 'context.branch != "main"',
                    "reason": "SERVICE_POLICY_WRONG_BRANCH",
                    "message": "Only main can be deployed",
                },
            ],
        },
        {"match": "deploy.*", "rules": [{"id": "anyone", "permit": "true"}]},
    ],
}


def _problems(text: str, **kwargs: Any) -> list[PolicyProblem]:
    with pytest.raises(PolicyInvalid) as caught:
        parse_policy_document(text, **kwargs)
    assert caught.value.code == "invalid_request"
    assert caught.value.status == 400
    return caught.value.problems


def _only_problem(text: str) -> PolicyProblem:
    problems = _problems(text)
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def _policy(rules: str, *, block_extra: str = "", match: str = "deploy.production") -> str:
    """A one-block YAML policy; ``rules`` is the rules list indented by 6 spaces."""
    return (
        "policy_id: p\n"
        "surfaces:\n"
        f"  - match: {match}\n"
        + textwrap.indent(textwrap.dedent(block_extra), "    ")
        + "    rules:\n"
        + textwrap.indent(textwrap.dedent(rules), "      ")
    )


# --- parsing ---------------------------------------------------------------------------------


def test_yaml_and_json_forms_parse_to_the_same_document() -> None:
    from_yaml = parse_policy_document(YAML_POLICY)
    from_json = parse_policy_document(json.dumps(JSON_DATA, indent=2))
    assert from_yaml.data == from_json.data
    assert from_yaml.policy_id == from_json.policy_id
    assert _without_lines(from_yaml) == _without_lines(from_json)
    assert from_yaml.policy_hash == from_json.policy_hash


def _without_lines(document: PolicyDocument) -> tuple[BlockSpec, ...]:
    # YAML rules know their line; JSON ones do not. Compare everything else.
    return tuple(
        dataclasses.replace(
            block, rules=tuple(dataclasses.replace(rule, line=None) for rule in block.rules)
        )
        for block in document.blocks
    )


def test_parsed_document_exposes_blocks_and_rules() -> None:
    document = parse_policy_document(YAML_POLICY)
    assert document.policy_id == "deploys"
    assert document.description == "Production deploys"
    assert [b.match for b in document.blocks] == ["deploy.production", "deploy.*"]
    production = document.blocks[0]
    assert production.require == ("context.branch",)
    main_only, wrong_branch = production.rules
    assert (main_only.id, main_only.effect, main_only.ttl_seconds) == ("main-only", "permit", 600)
    assert main_only.condition == 'context.branch == "main"'
    assert (wrong_branch.effect, wrong_branch.reason) == ("deny", "SERVICE_POLICY_WRONG_BRANCH")
    assert wrong_branch.message == "Only main can be deployed"


def test_rule_remembers_the_line_of_its_condition() -> None:
    document = parse_policy_document(YAML_POLICY)
    assert [r.line for r in document.blocks[0].rules] == [8, 11]


def test_policy_hash_is_sha256_of_the_rfc8785_form_of_the_document() -> None:
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(JSON_DATA)).hexdigest()
    assert parse_policy_document(YAML_POLICY).policy_hash == expected


def test_policy_hash_ignores_formatting_and_key_order() -> None:
    reordered = dict(reversed(list(JSON_DATA.items())))
    compact = json.dumps(reordered, separators=(",", ":"))
    assert (
        parse_policy_document(compact).policy_hash == parse_policy_document(YAML_POLICY).policy_hash
    )


def test_policy_hash_changes_when_a_condition_changes() -> None:
    changed = YAML_POLICY.replace('== "main"', '== "master"')
    assert (
        parse_policy_document(changed).policy_hash != parse_policy_document(YAML_POLICY).policy_hash
    )


def test_policy_id_is_taken_from_the_publish_call_when_the_document_has_none() -> None:
    text = YAML_POLICY.replace("policy_id: deploys\n", "")
    assert parse_policy_document(text, policy_id="deploys").policy_id == "deploys"


def test_policy_id_that_differs_from_the_published_one_is_refused() -> None:
    problems = _problems(YAML_POLICY, policy_id="other")
    assert [p.path for p in problems] == ["policy_id"]
    assert problems[0].line == 1


def test_boolean_condition_is_read_as_the_cel_literal() -> None:
    document = parse_policy_document(_policy("- id: always\n  permit: true\n"))
    assert document.blocks[0].rules[0].condition == "true"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("1h1m1s", 3661), (45, 45)],
)
def test_ttl_accepts_durations_and_seconds(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_ttl_of_24_hours_is_the_maximum() -> None:
    assert parse_duration("24h") == MAX_TTL_SECONDS


@pytest.mark.parametrize("value", ["", "0s", "0", "10", "10 m", "1d", "25h", "m", -5, 0, True, 1.5])
def test_bad_ttl_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="ttl"):
        parse_duration(value)


# --- validation: each problem with its reason and line --------------------------------------


def test_unknown_field_is_refused_with_its_line() -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n  tll: 10m\n"))
    assert problem.path == "surfaces[0].rules[0].tll"
    assert "unknown field 'tll'" in problem.reason
    assert problem.line == 7


def test_unknown_top_level_field_is_refused() -> None:
    text = (
        "policy_id: p\n"
        "version: 2\n"
        "surfaces:\n"
        "  - match: deploy.production\n"
        "    rules: [{id: r, permit: 'true'}]\n"
    )
    problem = _only_problem(text)
    assert problem.path == "version"
    assert problem.line == 2


def test_duplicate_rule_id_is_refused_with_the_line_of_the_second() -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n- id: r\n  deny: 'false'\n"))
    assert problem.path == "surfaces[0].rules[1].id"
    assert "duplicate rule id 'r'" in problem.reason
    assert problem.rule_id == "r"
    assert problem.line == 7


def test_duplicate_yaml_key_is_refused_with_its_line() -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n  permit: 'false'\n"))
    assert "duplicate key" in problem.reason
    assert problem.line == 7


def test_duplicate_json_key_is_refused_like_a_duplicate_yaml_key() -> None:
    # The same ambiguous document must not be refused as YAML yet accepted as JSON.
    text = (
        '{"policy_id": "p", "surfaces": [{"match": "deploy.production", '
        '"rules": [{"id": "r", "permit": "false", "permit": "true"}]}]}'
    )
    problem = _only_problem(text)
    assert "duplicate" in problem.reason


@pytest.mark.parametrize("match", ["deploy", "Deploy.Prod", "deploy..x", "deploy.prod/eu"])
def test_bad_surface_glob_is_refused_with_its_line(match: str) -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n", match=match))
    assert problem.path == "surfaces[0].match"
    assert "bad surface pattern" in problem.reason
    assert problem.line == 3


@pytest.mark.parametrize("ttl", ["10x", "0s", "25h", "-1"])
def test_bad_ttl_is_refused_with_its_line(ttl: str) -> None:
    problem = _only_problem(_policy(f"- id: r\n  permit: 'true'\n  ttl: {ttl}\n"))
    assert problem.path == "surfaces[0].rules[0].ttl"
    assert "ttl" in problem.reason
    assert problem.line == 7


def test_ttl_on_a_deny_rule_is_refused() -> None:
    problem = _only_problem(_policy("- id: r\n  deny: 'true'\n  ttl: 10m\n"))
    assert problem.path == "surfaces[0].rules[0].ttl"
    assert "only permit and escalate rules" in problem.reason


@pytest.mark.parametrize(
    "path", ["branch", "context", "context.", "context..a", "ctx.branch", "payload", "now.x"]
)
def test_malformed_require_path_is_refused_with_its_line(path: str) -> None:
    problem = _only_problem(
        _policy("- id: r\n  permit: 'true'\n", block_extra=f"require: ['{path}']\n")
    )
    assert problem.path == "surfaces[0].require[0]"
    assert "malformed require path" in problem.reason
    assert problem.line == 4


@pytest.mark.parametrize("path", ["actor", "action", "context.branch", "payload.amount.value"])
def test_well_formed_require_paths_are_accepted(path: str) -> None:
    text = _policy("- id: r\n  permit: 'true'\n", block_extra=f"require: ['{path}']\n")
    assert parse_policy_document(text).blocks[0].require == (path,)


def test_yaml_boolean_rule_id_no_is_refused_with_its_line() -> None:
    # YAML 1.1 reads an unquoted `no` as false: a rule id must be a string.
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n- id: no\n  deny: 'true'\n"))
    assert problem.path == "surfaces[0].rules[1].id"
    assert "rule id" in problem.reason
    assert problem.line == 7


def test_rule_with_both_permit_and_deny_is_refused() -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n  deny: 'true'\n"))
    assert "exactly one of 'permit', 'deny' or 'escalate'" in problem.reason
    assert problem.line == 5


def test_rule_with_neither_permit_nor_deny_is_refused() -> None:
    problem = _only_problem(_policy("- id: r\n  message: hello\n"))
    assert "exactly one of 'permit', 'deny' or 'escalate'" in problem.reason


def test_reason_outside_service_policy_namespace_is_refused() -> None:
    problem = _only_problem(_policy("- id: r\n  deny: 'true'\n  reason: WRONG_BRANCH\n"))
    assert problem.path == "surfaces[0].rules[0].reason"
    assert problem.line == 7


@pytest.mark.parametrize("condition", ["''", "'   '", "[1]", "{a: 1}", "3"])
def test_condition_that_is_not_an_expression_string_is_refused(condition: str) -> None:
    problem = _only_problem(_policy(f"- id: r\n  permit: {condition}\n"))
    assert problem.path == "surfaces[0].rules[0].permit"
    assert problem.line == 6


def test_block_without_rules_is_refused() -> None:
    problem = _only_problem("policy_id: p\nsurfaces:\n  - match: deploy.production\n")
    assert problem.path == "surfaces[0].rules"


@pytest.mark.parametrize("text", ["policy_id: p\n", "policy_id: p\nsurfaces: []\n"])
def test_document_without_surface_blocks_is_refused(text: str) -> None:
    assert _only_problem(text).path == "surfaces"


@pytest.mark.parametrize("policy_id", ["Deploys", "-x", "a" * 65, "a b"])
def test_bad_policy_id_is_refused(policy_id: str) -> None:
    text = YAML_POLICY.replace("policy_id: deploys", f"policy_id: '{policy_id}'")
    assert [p.path for p in _problems(text)] == ["policy_id"]


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = _policy("- id: r\n  permit: 'true'\n  ttl: 1d\n  colour: red\n", match="x")
    assert {p.path for p in _problems(text)} == {
        "surfaces[0].match",
        "surfaces[0].rules[0].ttl",
        "surfaces[0].rules[0].colour",
    }


def test_invalid_yaml_is_refused_with_its_line() -> None:
    problem = _only_problem("policy_id: p\nsurfaces:\n  - match: [unclosed\n")
    assert "invalid YAML" in problem.reason
    assert problem.line is not None


def test_invalid_json_is_refused_with_its_line() -> None:
    problem = _only_problem('{"policy_id": "p",\n "surfaces": [,]}')
    assert "invalid JSON" in problem.reason
    assert problem.line == 2


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- a list\n", "just text\n"])
def test_document_that_is_not_a_mapping_is_refused(text: str) -> None:
    _problems(text)


def test_unquoted_yaml_date_is_refused_as_not_plain_json() -> None:
    text = _policy("- id: r\n  permit: 'true'\n  message: 2026-01-01\n")
    assert "not plain JSON data" in _only_problem(text).reason


def test_document_over_256_kib_is_refused() -> None:
    text = YAML_POLICY + "#" + "x" * (256 * 1024) + "\n"
    assert "256 KiB" in _only_problem(text).reason


def test_problem_renders_its_path_line_and_reason() -> None:
    problem = _only_problem(_policy("- id: r\n  permit: 'true'\n  tll: 10m\n"))
    assert str(problem).startswith("surfaces[0].rules[0].tll (line 7): unknown field")
    assert problem.as_dict()["line"] == 7
