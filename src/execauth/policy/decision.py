"""What an evaluation concludes: the decision, the rule behind it and why."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    PERMIT = "PERMIT"
    DENY = "DENY"
    SILENCE = "SILENCE"


class Reason:
    """The detailed reason codes of DESIGN.md §5 (rules may name their own ``SERVICE_POLICY_*``)."""

    DENIED = "SERVICE_POLICY_DENIED"
    NO_MATCHING_RULE = "SERVICE_POLICY_NO_MATCHING_RULE"
    MISSING_CONTEXT = "SERVICE_POLICY_MISSING_CONTEXT"
    EVALUATION_ERROR = "SERVICE_POLICY_EVALUATION_ERROR"
    CONFLICT = "SERVICE_POLICY_CONFLICT"


@dataclass(frozen=True, slots=True)
class PolicyRef:
    """Which policy version decided: carried into the receipt and the stored execution."""

    policy_id: str
    version: int
    policy_hash: str


DEFAULT_PERMIT_TTL_SECONDS = 15 * 60


@dataclass(frozen=True, slots=True)
class Decision:
    """The result of evaluating one request against one surface block.

    ``reason`` is the detailed ``SERVICE_POLICY_*`` code (``None`` on PERMIT);
    ``ttl_seconds`` is set on PERMIT only.
    """

    outcome: Outcome
    rule_id: str | None
    reason: str | None
    message: str | None
    ttl_seconds: int | None = None

    @property
    def enforcement(self) -> str:
        return "EXECUTED" if self.outcome is Outcome.PERMIT else "BLOCKED"

    @property
    def reason_category(self) -> str | None:
        """The coarse ``reason_code`` of spec §2.2 rule 2."""
        if self.outcome is Outcome.DENY:
            return "POLICY_VIOLATION"
        if self.outcome is Outcome.SILENCE:
            return "INDETERMINATE_EVALUATION"
        return None
