"""Policy files on disk: which files a path holds, each file's policy id, the publish check.

One place for what ``execauth policy check | test | eval | push | sync`` and
``execauth replay --draft`` read, so that a file is named, identified and validated the
same way offline as the service does at publish (``parse_policy_document`` then
``compile_policy`` with the publish-time limits). Reads files; nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy.decision import PolicyRef
from execauth.policy.document import PolicyDocument, parse_policy_document
from execauth.policy.engine import CompiledPolicy, compile_policy

POLICY_SUFFIXES = (".yaml", ".yml", ".json")
CASES_SUFFIXES = (".cases.yaml", ".cases.yml")


@dataclass(frozen=True, slots=True)
class PolicyFile:
    """One file read and checked as publishing would check it."""

    path: Path
    policy_id: str
    text: str
    document: PolicyDocument | None  # None when refused
    compiled: CompiledPolicy | None
    problems: tuple[PolicyProblem, ...]

    @property
    def valid(self) -> bool:
        return not self.problems


def policy_files(path: Path) -> list[Path]:
    """The policy documents at ``path``: the file itself, or a directory's (not recursive)."""
    if path.is_file():
        return [path]
    return sorted(
        p
        for p in path.iterdir()
        if p.is_file() and p.name.endswith(POLICY_SUFFIXES) and not p.name.endswith(CASES_SUFFIXES)
    )


def policy_id_of(path: Path, text: str) -> str:
    """The document's own ``policy_id``, else the file name up to its first dot."""
    try:
        data = yaml.safe_load(text)  # JSON is YAML too; errors are reported by the real parse
    except yaml.YAMLError:
        data = None
    declared = data.get("policy_id") if isinstance(data, dict) else None
    return declared if isinstance(declared, str) else path.name.split(".")[0]


def check_text(path: Path, text: str, policy_id: str | None = None) -> PolicyFile:
    """Parse and compile ``text`` (read from ``path``) exactly as publishing would."""
    policy_id = policy_id or policy_id_of(path, text)
    try:
        document = parse_policy_document(text, policy_id=policy_id, source_name=str(path))
        compiled = compile_policy(document, PolicyRef(policy_id, 1, document.policy_hash))
    except PolicyInvalid as exc:
        return PolicyFile(path, policy_id, text, None, None, tuple(exc.problems))
    return PolicyFile(path, policy_id, text, document, compiled, ())


def check_files(paths: Iterable[Path]) -> list[PolicyFile]:
    """Check every file, and that no two files publish the same policy id.

    ``OSError`` or ``UnicodeDecodeError`` when a file cannot be read as UTF-8 text.
    """
    checked: list[PolicyFile] = []
    seen: dict[str, Path] = {}
    for path in paths:
        result = check_text(path, path.read_text(encoding="utf-8"))
        if result.policy_id in seen:
            reason = f"policy_id {result.policy_id!r} is also the id of {seen[result.policy_id]}"
            problem = PolicyProblem("policy_id", reason)
            result = PolicyFile(path, result.policy_id, result.text, None, None, (problem,))
        else:
            seen[result.policy_id] = path
        checked.append(result)
    return checked


def describe_problem(source: Path | str, problem: PolicyProblem) -> str:
    """``file:line: rule R: path: reason`` — the form ``execauth policy push`` prints a
    publish refusal in, so an offline check and the service read the same."""
    where = f"{source}:{problem.line}" if problem.line is not None else str(source)
    rule = f"rule {problem.rule_id}" if problem.rule_id else ""
    return ": ".join(part for part in (where, rule, problem.path, problem.reason) if part)
