"""Policy tests: table-driven cases run offline through the server's own decision path.

A case file (``*.cases.yaml`` next to the policies, docs/policy-language.md "Testing")::

    now: "2026-01-07T12:00:00Z"      # optional default for the file's cases
    org: {plan: standard}             # optional default org facts (merged over DEFAULT_ORG)
    cases:
      - name: release bot deploys main
        now: "2026-01-09T16:00:00Z"  # optional, RFC 3339
        org: {plan: enterprise}       # optional
        request:                      # the execute request body, as a client sends it
          surface: deploy.production
          actor: release-bot
          context: {branch: main}
        expect:
          decision: PERMIT            # PERMIT|DENY|SILENCE|ESCALATE|UNGOVERNED|INVALID_REQUEST
          rule_id: release-from-main  # optional (null: no rule)
          reason: null                # optional
          ttl: 10m                    # optional, PERMIT only
          message: ...                # optional
          constraints: {max_amount: 500}  # optional: the PERMIT's bound grant (null: none)
          single_use: true            # optional

Each request goes ``parse_execute_request`` → ``evaluation_input`` → ``PolicySet.select``
over every policy of the directory → ``evaluate``: exactly what the gateway does.
Reads files; everything else is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from execauth.errors import InvalidRequest, PolicyProblem
from execauth.policy.decision import Decision
from execauth.policy.document import parse_duration
from execauth.policy.engine import CompiledPolicy, PolicySet, evaluate
from execauth.policy.explain import UNGOVERNED
from execauth.policy.files import CASES_SUFFIXES, check_files, policy_files
from execauth.request import parse_execute_request
from execauth.wire_time import parse_timestamp, truncate_to_millis

DEFAULT_NOW = "2026-01-07T12:00:00Z"  # a Wednesday, noon UTC: fixed so tests are deterministic
DEFAULT_ORG: dict[str, Any] = {"id": "org_test", "plan": "free"}
INVALID_REQUEST = "INVALID_REQUEST"  # the server would answer 400 invalid_request
DECISIONS = ("PERMIT", "DENY", "SILENCE", "ESCALATE", UNGOVERNED, INVALID_REQUEST)

_FILE_FIELDS = {"now", "org", "cases"}
_CASE_FIELDS = {"name", "now", "org", "request", "expect", "description"}
_EXPECT_FIELDS = {
    "decision", "rule_id", "reason", "ttl", "message", "constraints", "single_use",
}  # fmt: skip


class CaseFileError(ValueError):
    """A case file that cannot be read or is malformed (a usage error: exit 2)."""


class PolicyFileInvalid(Exception):
    """A policy file of the directory is refused, as publishing would refuse it."""

    def __init__(self, path: Path, problems: list[PolicyProblem]) -> None:
        super().__init__(f"{path}: {problems[0]}")
        self.path = path
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Expectation:
    decision: str
    fields: dict[str, Any]  # the optional keys given: rule_id, reason, ttl (seconds), message


@dataclass(frozen=True, slots=True)
class Case:
    source: Path
    name: str
    request: Any
    now: datetime
    org: dict[str, Any]
    expect: Expectation


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the server would answer, in the terms a case compares."""

    decision: str
    rule_id: str | None = None
    reason: str | None = None
    ttl: int | None = None
    message: str | None = None
    constraints: dict[str, Any] | None = None
    single_use: bool = False

    @classmethod
    def of(cls, decision: Decision | None) -> Outcome:
        if decision is None:
            return cls(UNGOVERNED)
        return cls(
            decision.outcome.value,
            decision.rule_id,
            decision.reason,
            decision.ttl_seconds,
            decision.message,
            dict(decision.constraints) if decision.constraints is not None else None,
            decision.single_use,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "rule_id": self.rule_id,
            "reason": self.reason,
            "ttl": self.ttl,
            "message": self.message,
            "constraints": self.constraints,
            "single_use": self.single_use,
        }


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    actual: Outcome
    mismatches: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.case.source),
            "name": self.case.name,
            "passed": self.passed,
            "expected": {"decision": self.case.expect.decision, **self.case.expect.fields},
            "actual": self.actual.as_dict(),
            "mismatches": list(self.mismatches),
        }


@dataclass(slots=True)
class SuiteReport:
    policies: list[str] = field(default_factory=list)  # "policy_id (file)"
    results: list[CaseResult] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(not r.passed for r in self.results)

    @property
    def passed(self) -> int:
        return len(self.results) - self.failed

    def as_dict(self) -> dict[str, Any]:
        return {
            "policies": self.policies,
            "passed": self.passed,
            "failed": self.failed,
            "cases": [r.as_dict() for r in self.results],
        }


def case_files(path: Path) -> list[Path]:
    directory = path if path.is_dir() else path.parent
    return sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(CASES_SUFFIXES))


def load_policies(paths: Iterable[Path]) -> tuple[PolicySet, list[str]]:
    """Parse and compile each file as publishing would; ``PolicyFileInvalid`` on the first refusal.

    The policy id is the document's ``policy_id``, else the file name without suffix.
    """
    compiled: list[CompiledPolicy] = []
    names: list[str] = []
    for checked in check_files(paths):
        if checked.compiled is None:
            raise PolicyFileInvalid(checked.path, list(checked.problems))
        compiled.append(checked.compiled)
        names.append(f"{checked.policy_id} ({checked.path.name})")
    return PolicySet(compiled), names


def decide(
    policies: PolicySet, body: Any, *, now: datetime, org: Mapping[str, Any]
) -> tuple[Outcome, dict[str, Any] | None]:
    """The gateway's path, offline: the outcome and the normalized evaluation input."""
    try:
        request = parse_execute_request(body, None)
    except InvalidRequest as exc:
        return Outcome(INVALID_REQUEST, message=str(exc)), None
    evaluation_input = request.evaluation_input()
    selected = policies.select(request.surface)
    if selected is None:
        return Outcome(UNGOVERNED), evaluation_input
    _, block = selected
    decision = evaluate(block, evaluation_input, now=now, org=org, request_converts=request.plain)
    return Outcome.of(decision), evaluation_input


def run_case(policies: PolicySet, case: Case) -> CaseResult:
    actual, _ = decide(policies, case.request, now=case.now, org=case.org)
    mismatches = []
    if actual.decision != case.expect.decision:
        mismatches.append(f"decision: expected {case.expect.decision}, got {actual.decision}")
    for key, expected in case.expect.fields.items():
        got = getattr(actual, key)
        if got != expected:
            mismatches.append(f"{key}: expected {expected!r}, got {got!r}")
    return CaseResult(case, actual, tuple(mismatches))


def run_suite(policy_path: Path, cases_path: Path | None = None) -> SuiteReport:
    """Load every policy at ``policy_path`` and run the given case file, or every
    ``*.cases.yaml`` beside the policies. ``CaseFileError`` when there is nothing to run."""
    policies, names = load_policies(policy_files(policy_path))
    if not names:
        raise CaseFileError(f"no policy documents (*.yaml, *.yml, *.json) in {policy_path}")
    files = [cases_path] if cases_path is not None else case_files(policy_path)
    cases = [case for path in files for case in load_cases(path)]
    if not cases:
        raise CaseFileError(f"no test cases found for {policy_path} (*.cases.yaml)")
    report = SuiteReport(policies=names)
    report.results = [run_case(policies, case) for case in cases]
    return report


def load_cases(path: Path) -> list[Case]:
    """Read and check one case file; ``CaseFileError`` names the file, case and problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CaseFileError(f"{path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise CaseFileError(f"{path}: a case file is a mapping with a 'cases' list")
    _unknown(data, _FILE_FIELDS, f"{path}")
    default_now = _timestamp(data.get("now", DEFAULT_NOW), f"{path}: now")
    default_org = {**DEFAULT_ORG, **_mapping(data.get("org", {}), f"{path}: org")}
    cases = []
    names: set[str] = set()
    for index, raw in enumerate(data["cases"]):
        where = f"{path}: cases[{index}]"
        if not isinstance(raw, dict):
            raise CaseFileError(f"{where}: a case is a mapping with name, request and expect")
        _unknown(raw, _CASE_FIELDS, where)
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise CaseFileError(f"{where}: 'name' must be a non-empty string")
        if name in names:
            raise CaseFileError(f"{where}: duplicate case name {name!r}")
        names.add(name)
        where = f"{path}: case {name!r}"
        if "request" not in raw:
            raise CaseFileError(f"{where}: 'request' (the execute request body) is required")
        now = _timestamp(raw["now"], f"{where}: now") if "now" in raw else default_now
        org = {**default_org, **_mapping(raw.get("org", {}), f"{where}: org")}
        expect = _expectation(raw.get("expect"), where)
        cases.append(Case(path, name, raw["request"], now, org, expect))
    return cases


def _expectation(raw: Any, where: str) -> Expectation:
    if not isinstance(raw, dict) or raw.get("decision") not in DECISIONS:
        raise CaseFileError(f"{where}: 'expect' needs a decision, one of {', '.join(DECISIONS)}")
    _unknown(raw, _EXPECT_FIELDS, f"{where}: expect")
    fields = {k: v for k, v in raw.items() if k != "decision"}
    if fields.get("ttl") is not None:
        try:
            fields["ttl"] = parse_duration(fields["ttl"])
        except ValueError as exc:
            raise CaseFileError(f"{where}: expect.ttl: {exc}") from exc
    if fields.get("constraints") is not None and not isinstance(fields["constraints"], dict):
        raise CaseFileError(f"{where}: expect.constraints must be a mapping or null")
    if "single_use" in fields and not isinstance(fields["single_use"], bool):
        raise CaseFileError(f"{where}: expect.single_use must be true or false")
    for key in ("rule_id", "reason", "message"):
        if key in fields and fields[key] is not None and not isinstance(fields[key], str):
            raise CaseFileError(f"{where}: expect.{key} must be a string or null")
    return Expectation(raw["decision"], fields)


def _unknown(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise CaseFileError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {known})")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CaseFileError(f"{where}: must be a mapping")
    return value


def _timestamp(value: Any, where: str) -> datetime:
    """RFC 3339 text (or an unquoted YAML timestamp with a zone) → UTC, millisecond precision."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise CaseFileError(f"{where}: timestamp has no time zone (end it with Z)")
        return truncate_to_millis(value)
    try:
        return truncate_to_millis(parse_timestamp(value))
    except ValueError as exc:
        raise CaseFileError(f"{where}: {exc}") from exc
