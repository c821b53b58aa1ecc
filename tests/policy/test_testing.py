"""Policy tests (execauth.policy.testing) and the cookbook in examples/policies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from execauth.policy.files import policy_files
from execauth.policy.testing import (
    INVALID_REQUEST,
    CaseFileError,
    PolicyFileInvalid,
    case_files,
    load_cases,
    run_suite,
)

COOKBOOK = Path(__file__).resolve().parents[2] / "examples" / "policies"

POLICY = """\
policy_id: deploys
surfaces:
  - match: deploy.production
    require: [context.branch]
    rules:
      - id: main-only
        permit: context.branch == "main"
        ttl: 10m
"""


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _cases(
    expect: str, request: str = "{surface: deploy.production, context: {branch: main}}"
) -> str:
    return f"cases:\n  - name: one\n    request: {request}\n    expect: {expect}\n"


def test_every_cookbook_case_passes() -> None:
    report = run_suite(COOKBOOK)
    failures = [(r.case.name, r.mismatches) for r in report.results if not r.passed]
    assert failures == []
    assert len(report.policies) >= 6


def test_every_cookbook_policy_has_cases_covering_each_decision() -> None:
    for policy in policy_files(COOKBOOK):
        cases = load_cases(policy.with_name(policy.name.split(".")[0] + ".cases.yaml"))
        assert len(cases) >= 4, policy
        assert {"PERMIT", "DENY", "SILENCE"} <= {c.expect.decision for c in cases}, policy


def test_case_files_are_not_policies() -> None:
    assert all(".cases." not in p.name for p in policy_files(COOKBOOK))
    assert len(case_files(COOKBOOK)) == len(policy_files(COOKBOOK))


def test_a_passing_case(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY)
    _write(
        tmp_path, "deploys.cases.yaml", _cases("{decision: PERMIT, rule_id: main-only, ttl: 10m}")
    )
    report = run_suite(tmp_path)
    assert (report.passed, report.failed) == (1, 0)


def test_a_failing_case_names_each_mismatch(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY)
    _write(tmp_path, "deploys.cases.yaml", _cases("{decision: DENY, rule_id: other, ttl: 5m}"))
    report = run_suite(tmp_path)
    assert report.failed == 1
    mismatches = report.results[0].mismatches
    assert "decision: expected DENY, got PERMIT" in mismatches
    assert "rule_id: expected 'other', got 'main-only'" in mismatches
    assert "ttl: expected 300, got 600" in mismatches


def test_a_surface_no_policy_governs_is_ungoverned(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY)
    _write(tmp_path, "t.cases.yaml", _cases("{decision: UNGOVERNED}", "{surface: deploy.staging}"))
    assert run_suite(tmp_path).failed == 0


def test_a_request_the_server_refuses_is_invalid_request(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY)
    _write(
        tmp_path, "t.cases.yaml", _cases(f"{{decision: {INVALID_REQUEST}}}", "{surface: Deploy}")
    )
    assert run_suite(tmp_path).failed == 0


def test_now_and_org_are_per_file_and_per_case(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "p.yaml",
        """\
        surfaces:
          - match: a.b
            rules:
              - {id: saturday-team, permit: 'now.getDayOfWeek() == 6 && org.plan == "team"'}
        """,
    )
    _write(
        tmp_path,
        "p.cases.yaml",
        """\
        now: "2026-01-10T10:00:00Z"
        org: {plan: team}
        cases:
          - {name: file defaults, request: {surface: a.b}, expect: {decision: PERMIT}}
          - name: case overrides
            now: 2026-01-07T10:00:00Z
            org: {plan: free}
            request: {surface: a.b}
            expect: {decision: DENY, reason: SERVICE_POLICY_NO_MATCHING_RULE}
        """,
    )
    report = run_suite(tmp_path)
    assert report.failed == 0
    assert report.policies == ["p (p.yaml)"]  # no policy_id: the file name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cases: {}", "'cases' list"),
        ("cases:\n  - {name: a, request: {}, expect: {decision: MAYBE}}", "expect"),
        ("cases:\n  - {name: a, request: {}, expect: {decision: DENY, rule: x}}", "unknown field"),
        ("cases:\n  - {name: a, requests: {}, expect: {decision: DENY}}", "unknown field"),
        ("cases:\n  - {name: a, expect: {decision: DENY}}", "'request'"),
        ("now: 2026-01-07T10:00:00\ncases: []", "time zone"),
        ("now: yesterday\ncases: []", "RFC 3339"),
        ("cases:\n  - {name: a, request: {}, expect: {decision: DENY}}\n"
         "  - {name: a, request: {}, expect: {decision: DENY}}", "duplicate case name"),
        ("cases: [", "while parsing"),
    ],
)  # fmt: skip
def test_malformed_case_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, "x.cases.yaml", text)
    with pytest.raises(CaseFileError, match=message):
        load_cases(path)


def test_an_invalid_policy_is_refused_with_its_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY.replace('"main"', '"main" &&'))
    _write(tmp_path, "deploys.cases.yaml", _cases("{decision: PERMIT}"))
    with pytest.raises(PolicyFileInvalid) as info:
        run_suite(tmp_path)
    assert info.value.path.name == "deploys.yaml"
    assert info.value.problems[0].line == 7


def test_two_files_with_the_same_policy_id_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "a.yaml", POLICY)
    _write(tmp_path, "b.yaml", POLICY)
    with pytest.raises(PolicyFileInvalid, match="also the id"):
        run_suite(tmp_path)


def test_no_cases_is_a_usage_error(tmp_path: Path) -> None:
    _write(tmp_path, "deploys.yaml", POLICY)
    with pytest.raises(CaseFileError, match="no test cases"):
        run_suite(tmp_path)
