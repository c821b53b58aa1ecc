"""The policy document: parse YAML or JSON, check its shape, locate problems by line.

Format (docs/policy-language.md, "Format")::

    policy_id: deploys            # optional; must equal the id it is published under
    description: Production deploys
    surfaces:
      - match: deploy.production   # exact surface or pattern (execauth.surfaces)
        require: [context.branch]  # paths that must be present, else SILENCE
        rules:
          - id: main-only
            permit: context.branch == "main"
            ttl: 10m               # permits only; default 15m
            constraints:           # bound grant: signed into the PERMIT (policy.constraints)
              max_amount: {cel: "payload.limit"}
            single_use: true       # the PERMIT may be consumed once
          - id: freeze
            deny: now.getDayOfWeek() == 5
            reason: SERVICE_POLICY_CHANGE_FREEZE
            message: No deploys on Fridays

Expressions are checked by ``engine.compile_policy`` (compilation, allowed functions and
the size and nesting limits of ``policy.cost``); this module checks everything else.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import rfc8785
import yaml

from execauth.errors import PolicyInvalid, PolicyProblem
from execauth.policy import constraints as bound
from execauth.policy.decision import DEFAULT_APPROVER_ROLES, DEFAULT_PERMIT_TTL_SECONDS, Escalation
from execauth.surfaces import compile_surface_pattern

POLICY_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
RULE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
REASON_PATTERN = re.compile(r"^SERVICE_POLICY_[A-Z0-9_]{1,64}\Z")
REQUIRE_PATH_PATTERN = re.compile(r"^(actor|action|(context|payload)(\.[A-Za-z0-9_-]+)+)\Z")
DURATION_PATTERN = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")
MAX_TTL_SECONDS = 24 * 3600
MAX_DOCUMENT_BYTES = 256 * 1024

_TOP_FIELDS = {"policy_id", "description", "surfaces"}
_BLOCK_FIELDS = {"match", "require", "rules", "description"}
_RULE_FIELDS = {
    "id", "permit", "deny", "escalate", "reason", "message", "ttl", "description",
    "approvers", "quorum", "approval_ttl", "constraints", "single_use",
}  # fmt: skip
_EFFECTS = ("permit", "deny", "escalate")
_ESCALATE_ONLY = ("approvers", "quorum", "approval_ttl")
_APPROVER_FIELDS = {"roles", "keys"}
APPROVER_ROLES = ("admin", "auditor", "execute")  # tenancy.api_keys.ROLES
APPROVER_KEY_PATTERN = re.compile(r"^key_[0-9a-z]{26}\Z")
MAX_QUORUM = 10
_GRANT_FIELDS = ("constraints", "single_use")  # what a PERMIT carries: not on deny rules


@dataclass(frozen=True, slots=True)
class ConstraintSpec:
    """One constraint of a rule: a literal JSON ``value`` or a CEL ``expression``."""

    name: str
    value: Any  # the literal (None when computed)
    expression: str | None  # the CEL source of ``{cel: ...}``
    path: str
    line: int | None


@dataclass(frozen=True, slots=True)
class RuleSpec:
    id: str
    effect: str  # "permit" | "deny" | "escalate"
    condition: str
    reason: str | None
    message: str | None
    ttl_seconds: int | None
    path: str  # where it sits in the document, for error messages
    line: int | None
    escalation: Escalation | None = None  # escalate rules only
    constraints: tuple[ConstraintSpec, ...] = ()  # permit and escalate rules only
    single_use: bool = False


@dataclass(frozen=True, slots=True)
class BlockSpec:
    match: str
    require: tuple[str, ...]
    rules: tuple[RuleSpec, ...]


@dataclass(frozen=True, slots=True)
class PolicyDocument:
    policy_id: str
    description: str | None
    blocks: tuple[BlockSpec, ...]
    data: dict[str, Any]  # the document as JSON data, what policy_hash covers
    source_name: str

    @property
    def policy_hash(self) -> str:
        return policy_hash(self.data)


def policy_hash(data: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the RFC 8785 form of the document."""
    return "sha256:" + hashlib.sha256(rfc8785.dumps(data)).hexdigest()


def parse_duration(value: object) -> int:
    """``"90s"``, ``"15m"``, ``"1h30m"`` or a number of seconds → seconds; ``ValueError`` if bad."""
    if isinstance(value, bool):
        raise ValueError("ttl must be a duration such as '15m' or a number of seconds")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value and (m := DURATION_PATTERN.match(value)):
        h, mi, s = (int(g) if g else 0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + s
    else:
        raise ValueError(f"ttl {value!r} is not a duration such as '15m', '1h30m' or '90s'")
    if not 0 < seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl must be between 1 second and {MAX_TTL_SECONDS // 3600} hours")
    return seconds


def parse_policy_document(
    text: str, *, policy_id: str | None = None, source_name: str = "<policy>"
) -> PolicyDocument:
    """Parse and shape-check YAML or JSON ``text``; ``PolicyInvalid`` lists every problem."""
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise PolicyInvalid([PolicyProblem(source_name, "policy document exceeds 256 KiB")])
    data, lines = _load(text, source_name)
    return _checked(data, lines, policy_id, source_name)


def parse_policy_data(
    data: Any, *, policy_id: str | None = None, source_name: str = "<policy>"
) -> PolicyDocument:
    """Shape-check a document already decoded from JSON (a draft sent as an object).

    The same checks as ``parse_policy_document`` but for the text's: no size (the caller
    bounded the body it came in) and no line numbers (there is no text to point into).
    """
    return _checked(data, {}, policy_id, source_name)


def _checked(
    data: Any, lines: dict[str, int], policy_id: str | None, source_name: str
) -> PolicyDocument:
    checker = _Checker(lines, source_name)
    document = checker.document(data, policy_id)
    if checker.problems:
        raise PolicyInvalid(checker.problems)
    assert document is not None
    return document


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _load(text: str, source_name: str) -> tuple[Any, dict[str, int]]:
    """Decode JSON or YAML; for YAML also map each document path to its 1-based line."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return json.loads(text, object_pairs_hook=_refuse_duplicate_keys), {}
        except json.JSONDecodeError as exc:
            raise PolicyInvalid(
                [PolicyProblem(source_name, f"invalid JSON: {exc.msg}", line=exc.lineno)]
            ) from exc
        except _DuplicateKey as exc:
            # JSON parsers disagree on duplicates (first or last wins); YAML refuses them.
            raise PolicyInvalid([PolicyProblem(source_name, f"duplicate key {exc.key!r}")]) from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise PolicyInvalid(
            [
                PolicyProblem(
                    source_name, f"invalid YAML: {exc}", line=mark.line + 1 if mark else None
                )
            ]
        ) from exc
    if node is None:
        raise PolicyInvalid([PolicyProblem(source_name, "policy document is empty")])
    lines: dict[str, int] = {}
    duplicates: list[PolicyProblem] = []
    _index_lines(node, "", lines, duplicates, source_name)
    if duplicates:
        raise PolicyInvalid(duplicates)
    return yaml.safe_load(text), lines


def _index_lines(
    node: yaml.Node, path: str, lines: dict[str, int], dups: list[PolicyProblem], source: str
) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            if key in seen:
                dups.append(
                    PolicyProblem(child, "duplicate key", line=key_node.start_mark.line + 1)
                )
            seen.add(key)
            _index_lines(value_node, child, lines, dups, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, f"{path}[{index}]", lines, dups, source)


class _Checker:
    """Walks the decoded document, collecting every problem rather than stopping at the first."""

    def __init__(self, lines: dict[str, int], source_name: str) -> None:
        self.lines = lines
        self.source_name = source_name
        self.problems: list[PolicyProblem] = []

    def problem(self, path: str, reason: str, rule_id: str | None = None) -> None:
        self.problems.append(PolicyProblem(path, reason, rule_id=rule_id, line=self.line(path)))

    def line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rpartition(".")[0] if "." in path else ""
        return self.lines.get("")

    def unknown_fields(self, data: dict[str, Any], allowed: set[str], path: str) -> None:
        for key in data:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                self.problem(
                    where, f"unknown field {key!r} (allowed: {', '.join(sorted(allowed))})"
                )

    def document(self, data: Any, policy_id: str | None) -> PolicyDocument | None:
        if not isinstance(data, dict):
            self.problem("", "a policy document is a mapping with a 'surfaces' list")
            return None
        try:
            rfc8785.dumps(data)
        except (rfc8785.CanonicalizationError, TypeError) as exc:
            self.problem("", f"document is not plain JSON data (quote dates and times): {exc}")
            return None
        self.unknown_fields(data, _TOP_FIELDS, "")
        declared = data.get("policy_id")
        if declared is not None and policy_id is not None and declared != policy_id:
            self.problem("policy_id", f"policy_id {declared!r} differs from {policy_id!r}")
        effective_id = policy_id if policy_id is not None else declared
        if not isinstance(effective_id, str) or not POLICY_ID_PATTERN.match(effective_id):
            self.problem(
                "policy_id", "policy_id must be 1-64 of [a-z0-9_.-], starting alphanumeric"
            )
            effective_id = ""
        description = data.get("description")
        if description is not None and not isinstance(description, str):
            self.problem("description", "description must be a string")
        surfaces = data.get("surfaces")
        if not isinstance(surfaces, list) or not surfaces:
            self.problem("surfaces", "'surfaces' must be a non-empty list of blocks")
            return None
        blocks = tuple(
            b for i, raw in enumerate(surfaces) if (b := self.block(raw, f"surfaces[{i}]"))
        )
        return PolicyDocument(
            policy_id=effective_id,
            description=description if isinstance(description, str) else None,
            blocks=blocks,
            data=data,
            source_name=self.source_name,
        )

    def block(self, raw: Any, path: str) -> BlockSpec | None:
        if not isinstance(raw, dict):
            self.problem(path, "a surface block is a mapping with 'match' and 'rules'")
            return None
        self.unknown_fields(raw, _BLOCK_FIELDS, path)
        match = raw.get("match")
        try:
            compile_surface_pattern(match)
        except ValueError as exc:
            self.problem(f"{path}.match", f"bad surface pattern: {exc}")
        require = raw.get("require", [])
        if not isinstance(require, list) or not all(isinstance(p, str) for p in require):
            self.problem(f"{path}.require", "'require' must be a list of paths")
            require = []
        for index, req in enumerate(require):
            if not REQUIRE_PATH_PATTERN.match(req):
                self.problem(
                    f"{path}.require[{index}]",
                    f"malformed require path {req!r}: use actor, action, context.<key>[.<key>…] "
                    "or payload.<key>[.<key>…]",
                )
        rules_raw = raw.get("rules")
        if not isinstance(rules_raw, list) or not rules_raw:
            self.problem(f"{path}.rules", "'rules' must be a non-empty list")
            return None
        rules: list[RuleSpec] = []
        seen: set[str] = set()
        for index, rule_raw in enumerate(rules_raw):
            rule = self.rule(rule_raw, f"{path}.rules[{index}]")
            if rule is None:
                continue
            if rule.id in seen:
                self.problem(f"{path}.rules[{index}].id", f"duplicate rule id {rule.id!r}", rule.id)
            seen.add(rule.id)
            rules.append(rule)
        return BlockSpec(str(match), tuple(require), tuple(rules))

    def rule(self, raw: Any, path: str) -> RuleSpec | None:
        if not isinstance(raw, dict):
            self.problem(path, "a rule is a mapping with 'id' and 'permit', 'deny' or 'escalate'")
            return None
        self.unknown_fields(raw, _RULE_FIELDS, path)
        rule_id = raw.get("id")
        if not isinstance(rule_id, str) or not RULE_ID_PATTERN.match(rule_id):
            self.problem(f"{path}.id", "rule id must be 1-64 of [A-Za-z0-9_.-]")
            rule_id = None
        effects = [e for e in _EFFECTS if e in raw]
        if len(effects) != 1:
            self.problem(path, "a rule has exactly one of 'permit', 'deny' or 'escalate'", rule_id)
            return None
        effect = effects[0]
        condition = raw[effect]
        if isinstance(condition, bool):
            condition = "true" if condition else "false"
        if not isinstance(condition, str) or not condition.strip():
            self.problem(f"{path}.{effect}", "condition must be a CEL expression string", rule_id)
            return None
        reason = raw.get("reason")
        if reason is not None and (not isinstance(reason, str) or not REASON_PATTERN.match(reason)):
            self.problem(f"{path}.reason", "reason must match SERVICE_POLICY_[A-Z0-9_]+", rule_id)
        message = raw.get("message")
        if message is not None and not isinstance(message, str):
            self.problem(f"{path}.message", "message must be a string", rule_id)
        ttl_seconds: int | None = None
        if "ttl" in raw:
            if effect == "deny":
                self.problem(f"{path}.ttl", "only permit and escalate rules have a ttl", rule_id)
            else:
                try:
                    ttl_seconds = parse_duration(raw["ttl"])
                except ValueError as exc:
                    self.problem(f"{path}.ttl", str(exc), rule_id)
        constraints: tuple[ConstraintSpec, ...] = ()
        single_use = False
        if effect == "deny":
            for name in _GRANT_FIELDS:
                if name in raw:
                    self.problem(
                        f"{path}.{name}", f"only permit and escalate rules have {name}", rule_id
                    )
        else:
            if "constraints" in raw:
                constraints = self.constraints(raw["constraints"], f"{path}.constraints", rule_id)
            single_use = raw.get("single_use", False)
            if not isinstance(single_use, bool):
                self.problem(f"{path}.single_use", "single_use must be true or false", rule_id)
                single_use = False
        escalation: Escalation | None = None
        if effect == "escalate":
            escalation = self.escalation(raw, path, rule_id, ttl_seconds)
        else:
            for name in _ESCALATE_ONLY:
                if name in raw:
                    self.problem(f"{path}.{name}", f"only escalate rules have {name}", rule_id)
        if rule_id is None:
            return None
        return RuleSpec(
            id=rule_id,
            effect=effect,
            condition=condition,
            reason=reason if isinstance(reason, str) else None,
            message=message if isinstance(message, str) else None,
            ttl_seconds=ttl_seconds,
            path=f"{path}.{effect}",
            line=self.line(f"{path}.{effect}"),
            escalation=escalation,
            constraints=constraints,
            single_use=single_use,
        )

    def constraints(self, raw: Any, path: str, rule_id: str | None) -> tuple[ConstraintSpec, ...]:
        """Names checked, literal values checked now; CEL ones are compiled by the engine."""
        if not isinstance(raw, dict) or not raw:
            self.problem(path, "constraints is a non-empty mapping of name to value", rule_id)
            return ()
        if len(raw) > bound.MAX_CONSTRAINTS:
            self.problem(path, f"more than {bound.MAX_CONSTRAINTS} constraints", rule_id)
            return ()
        specs: list[ConstraintSpec] = []
        for name, value in raw.items():
            where = f"{path}.{name}"
            if (problem := bound.name_problem(name)) is not None:
                self.problem(where, problem, rule_id)
                continue
            expression = bound.expression_of(value)
            if expression is not None:
                if not expression.strip():
                    self.problem(where, "cel must be a CEL expression string", rule_id)
                    continue
                specs.append(ConstraintSpec(name, None, expression, where, self.line(where)))
                continue
            if (problem := bound.value_problem(name, value)) is not None:
                self.problem(where, problem, rule_id)
                continue
            specs.append(ConstraintSpec(name, value, None, where, self.line(where)))
        return tuple(specs)

    def escalation(
        self, raw: dict[str, Any], path: str, rule_id: str | None, ttl_seconds: int | None
    ) -> Escalation:
        """An escalate rule's approvers, quorum and times; documented defaults for the rest."""
        roles: tuple[str, ...] = DEFAULT_APPROVER_ROLES
        keys: tuple[str, ...] = ()
        approvers = raw.get("approvers")
        if approvers is not None:
            if not isinstance(approvers, dict):
                self.problem(
                    f"{path}.approvers", "approvers is a mapping of roles and keys", rule_id
                )
            else:
                self.unknown_fields(approvers, _APPROVER_FIELDS, f"{path}.approvers")
                roles = self.names(approvers, "roles", path, rule_id, APPROVER_ROLES)
                keys = self.names(approvers, "keys", path, rule_id, None)
                if not roles and not keys:
                    self.problem(f"{path}.approvers", "approvers names no role and no key", rule_id)
        quorum = raw.get("quorum", 1)
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= MAX_QUORUM:
            self.problem(f"{path}.quorum", f"quorum must be an integer 1-{MAX_QUORUM}", rule_id)
            quorum = 1
        if keys and not roles and quorum > len(keys):
            self.problem(f"{path}.quorum", "quorum exceeds the number of named keys", rule_id)
        approval_ttl = Escalation().approval_ttl_seconds
        if "approval_ttl" in raw:
            try:
                approval_ttl = parse_duration(raw["approval_ttl"])
            except ValueError as exc:
                self.problem(f"{path}.approval_ttl", str(exc), rule_id)
        return Escalation(
            roles=roles,
            keys=keys,
            quorum=quorum,
            approval_ttl_seconds=approval_ttl,
            permit_ttl_seconds=ttl_seconds or DEFAULT_PERMIT_TTL_SECONDS,
        )

    def names(
        self,
        approvers: dict[str, Any],
        field: str,
        path: str,
        rule_id: str | None,
        allowed: tuple[str, ...] | None,
    ) -> tuple[str, ...]:
        values = approvers.get(field, [])
        where = f"{path}.approvers.{field}"
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            self.problem(where, f"approvers.{field} must be a list of strings", rule_id)
            return ()
        for value in values:
            if allowed is not None and value not in allowed:
                self.problem(
                    where, f"unknown role {value!r} (allowed: {', '.join(allowed)})", rule_id
                )
            if allowed is None and not APPROVER_KEY_PATTERN.match(value):
                self.problem(where, f"{value!r} is not an API key id (key_…)", rule_id)
        return tuple(dict.fromkeys(values))
