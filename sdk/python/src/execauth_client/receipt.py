"""``Receipt``: the signed answer to one authorization request, as a typed value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from execauth_client.errors import UnexpectedResponse

if TYPE_CHECKING:
    from execauth_client.verify import KeyList, Verdict


def _str(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Receipt:
    """The receipt fields (docs/receipts.md) plus ``raw``, the exact JSON object received.

    Verification always works on ``raw``: the typed fields are for reading only.
    ``reason_code`` is the coarse code (``POLICY_VIOLATION``/``INDETERMINATE_EVALUATION``);
    ``policy_reason`` is the detailed ``SERVICE_POLICY_*`` code (wire name ``reasonCode``).
    """

    receipt_id: str
    decision: str
    surface: str | None
    timestamp: str | None
    key_id: str | None
    signature: str | None
    execution_id: str | None = None
    enforcement: str | None = None
    action: str | None = None
    actor: str | None = None
    org_id: str | None = None
    issuer: str | None = None
    expires_at: str | None = None
    policy_id: str | None = None
    policy_version: int | None = None
    policy_hash: str | None = None
    rule_id: str | None = None
    reason_code: str | None = None
    policy_reason: str | None = None
    message: str | None = None
    request_id: str | None = None
    request_digest: str | None = None
    receipt_hash: str | None = None
    approval_id: str | None = None  # an ESCALATE, or the outcome receipt of one
    approval_expires_at: str | None = None
    # The bound grant (docs/receipts.md): what the executor must respect, checked by
    # ``execauth_client.check_intent``; ``single_use``: consume before acting.
    constraints: Mapping[str, Any] | None = field(default=None, hash=False)
    single_use: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, hash=False)

    @classmethod
    def from_dict(cls, raw: object) -> Receipt:
        """A receipt from its JSON object; raises ``UnexpectedResponse`` if it is none."""
        if not isinstance(raw, Mapping):
            raise UnexpectedResponse("the answer is not a JSON object")
        receipt_id, decision = _str(raw, "receipt_id"), _str(raw, "decision")
        if receipt_id is None or decision is None:
            raise UnexpectedResponse("the answer is not a receipt (no receipt_id or decision)")
        version = raw.get("policy_version")
        constraints = raw.get("constraints")
        return cls(
            receipt_id=receipt_id,
            decision=decision,
            surface=_str(raw, "surface"),
            timestamp=_str(raw, "timestamp"),
            key_id=_str(raw, "key_id"),
            signature=_str(raw, "signature"),
            execution_id=_str(raw, "execution_id"),
            enforcement=_str(raw, "enforcement"),
            action=_str(raw, "action"),
            actor=_str(raw, "actor"),
            org_id=_str(raw, "org_id"),
            issuer=_str(raw, "issuer"),
            expires_at=_str(raw, "expires_at"),
            policy_id=_str(raw, "policy_id"),
            policy_version=version if isinstance(version, int) else None,
            policy_hash=_str(raw, "policy_hash"),
            rule_id=_str(raw, "rule_id"),
            reason_code=_str(raw, "reason_code"),
            policy_reason=_str(raw, "reasonCode"),
            message=_str(raw, "message"),
            request_id=_str(raw, "request_id"),
            request_digest=_str(raw, "request_digest"),
            receipt_hash=_str(raw, "receiptHash"),
            approval_id=_str(raw, "approval_id"),
            approval_expires_at=_str(raw, "approval_expires_at"),
            constraints=constraints if isinstance(constraints, Mapping) else None,
            single_use=raw.get("single_use") is True,
            raw=dict(raw),
        )

    @property
    def is_permit(self) -> bool:
        """The decision is PERMIT. Says nothing about authenticity: use ``require_permit``."""
        return self.decision == "PERMIT"

    def verify(self, keys: KeyList | Mapping[str, Any], *, now: datetime | None = None) -> Verdict:
        """Verify this receipt offline against ``keys`` (see ``execauth_client.verify``)."""
        from execauth_client.verify import verify

        return verify(self, keys, now=now)
