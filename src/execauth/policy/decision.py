"""What an evaluation concludes: the decision, the rule behind it and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    PERMIT = "PERMIT"
    DENY = "DENY"
    SILENCE = "SILENCE"
    ESCALATE = "ESCALATE"  # a person must approve first (docs/approvals.md)


class Reason:
    """The detailed reason codes (docs/policy-language.md, "Evaluation").

    Rules may name their own ``SERVICE_POLICY_*``.
    """

    DENIED = "SERVICE_POLICY_DENIED"
    NO_MATCHING_RULE = "SERVICE_POLICY_NO_MATCHING_RULE"
    MISSING_CONTEXT = "SERVICE_POLICY_MISSING_CONTEXT"
    EVALUATION_ERROR = "SERVICE_POLICY_EVALUATION_ERROR"
    CONFLICT = "SERVICE_POLICY_CONFLICT"
    APPROVAL_REQUIRED = "SERVICE_POLICY_APPROVAL_REQUIRED"
    APPROVAL_REJECTED = "SERVICE_POLICY_APPROVAL_REJECTED"
    APPROVAL_EXPIRED = "SERVICE_POLICY_APPROVAL_EXPIRED"


@dataclass(frozen=True, slots=True)
class PolicyRef:
    """Which policy version decided: carried into the receipt and the stored execution."""

    policy_id: str
    version: int
    policy_hash: str


DEFAULT_PERMIT_TTL_SECONDS = 15 * 60
DEFAULT_APPROVAL_TTL_SECONDS = 3600
DEFAULT_APPROVER_ROLES = ("admin",)


@dataclass(frozen=True, slots=True)
class Escalation:
    """Who may approve an ESCALATE, how many must, and for how long (docs/approvals.md).

    Part of the policy (and so of its hash): the approvers of a request are the ones
    the rule named when it was decided, not whoever a later version names.
    """

    roles: tuple[str, ...] = DEFAULT_APPROVER_ROLES  # API key roles of the org
    keys: tuple[str, ...] = ()  # named API key ids (any role)
    quorum: int = 1  # distinct approvers needed
    approval_ttl_seconds: int = DEFAULT_APPROVAL_TTL_SECONDS  # how long it may wait
    permit_ttl_seconds: int = DEFAULT_PERMIT_TTL_SECONDS  # the PERMIT it becomes

    def as_json(self) -> dict[str, object]:
        return {
            "roles": list(self.roles),
            "keys": list(self.keys),
            "quorum": self.quorum,
            "approval_ttl_seconds": self.approval_ttl_seconds,
            "permit_ttl_seconds": self.permit_ttl_seconds,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    """The result of evaluating one request against one surface block.

    ``reason`` is the detailed ``SERVICE_POLICY_*`` code (``None`` on PERMIT);
    ``ttl_seconds`` is set on PERMIT only, ``escalation`` on ESCALATE only.
    ``constraints`` (``None`` when the rule states none) and ``single_use`` are the bound
    grant a PERMIT carries, or the one an ESCALATE's PERMIT will carry once approved
    (docs/policy-language.md, "Constraints").
    """

    outcome: Outcome
    rule_id: str | None
    reason: str | None
    message: str | None
    ttl_seconds: int | None = None
    escalation: Escalation | None = None
    constraints: Mapping[str, Any] | None = field(default=None, hash=False)
    single_use: bool = False

    @property
    def enforcement(self) -> str:
        return "EXECUTED" if self.outcome is Outcome.PERMIT else "BLOCKED"

    @property
    def reason_category(self) -> str | None:
        """The coarse ``reason_code`` (docs/receipts.md, "Fields")."""
        if self.outcome is Outcome.DENY:
            return "POLICY_VIOLATION"
        if self.outcome is Outcome.SILENCE:
            return "INDETERMINATE_EVALUATION"
        if self.outcome is Outcome.ESCALATE:
            return "APPROVAL_REQUIRED"
        return None
