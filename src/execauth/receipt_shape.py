"""The stateless shape check behind ``POST /protocol/verify-receipt`` (docs/receipts.md).

The contract calls it a shape check "of a receipt's decision and timestamp"
(docs/receipts.md, "Shape check"), and the published variants disagree on everything
else (variant B's SILENCE body carries no signature and no key id, its DENY no key id;
the contract leaves reason codes other than the two it shows open). So by default only
``decision`` and ``timestamp`` are required, and every other field is checked for
consistency *when present*: the
enforcement follows the decision, ``expires_at`` comes after ``timestamp`` and only
on a PERMIT, identifiers and signatures have their documented forms, a reason code
is code-shaped. What a full receipt would carry but this one lacks is a *warning*,
not an error. ``strict=True`` asks instead whether this is a complete receipt as
this service issues them (docs/receipts.md, "Shape check").

It checks form, not authenticity: the signature is checked by ``execauth.verify``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from execauth.wire_time import parse_timestamp

DECISIONS = ("PERMIT", "DENY", "SILENCE", "ESCALATE")
_FORMATS = {
    "receipt_id": re.compile(r"^service_rcpt_[0-9a-f]{16}\Z"),
    "execution_id": re.compile(r"^service_exec_[0-9A-HJKMNP-TV-Z]{26}\Z"),
    "key_id": re.compile(r"^service_key_[0-9a-f]{16}\Z"),
    "signature": re.compile(r"^ed25519:[A-Za-z0-9+/]{86}==\Z"),
    "authoritySignature": re.compile(r"^ed25519:[A-Za-z0-9+/]{86}==\Z"),
    "receiptHash": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
    "request_digest": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
    "policy_hash": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
    "approval_id": re.compile(r"^service_appr_[0-9A-HJKMNP-TV-Z]{26}\Z"),
    "escalation_receipt_id": re.compile(r"^service_rcpt_[0-9a-f]{16}\Z"),
}
# A reason code of any value, as long as it looks like one: upper-case words joined
# by underscores (POLICY_VIOLATION, SERVICE_POLICY_WRONG_BRANCH).
_CODE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*\Z")
_CODE_MAX = 128
_TEXT_FIELDS = ("surface", "action", "actor", "org_id", "issuer", "policy_id", "message")
_ENFORCEMENT = {
    "PERMIT": "EXECUTED",
    "DENY": "BLOCKED",
    "SILENCE": "BLOCKED",
    "ESCALATE": "BLOCKED",  # nothing runs until the approval's PERMIT (docs/approvals.md)
}
# The two values the contract shows (docs/receipts.md); strict mode holds a receipt to
# them, as this service always sends them (the detailed code travels in reasonCode).
_SHOWN_REASON = {
    "DENY": "POLICY_VIOLATION",
    "SILENCE": "INDETERMINATE_EVALUATION",
    "ESCALATE": "APPROVAL_REQUIRED",
}
_STRICT_REQUIRED = ("receipt_id", "enforcement", "surface", "signature", "key_id")


@dataclass(frozen=True, slots=True)
class ShapeVerdict:
    """``errors`` make a receipt invalid; ``warnings`` only say what it does not tell."""

    errors: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": list(self.errors), "warnings": list(self.warnings)}


def check_receipt_shape(receipt: Any, *, strict: bool = False) -> ShapeVerdict:
    """Every shape problem of ``receipt``; ``strict`` demands a full receipt of this service."""
    if not isinstance(receipt, dict):
        return ShapeVerdict(("receipt must be a JSON object",), ())
    errors: list[str] = []
    warnings: list[str] = []
    decision = _decision(receipt, errors)
    timestamp = _timestamp(receipt, "timestamp", errors, required=True)
    _check_enforcement(receipt, decision, errors)
    _check_expiry(receipt, decision, timestamp, errors, warnings, strict=strict)
    _check_reason_code(receipt, decision, errors, warnings, strict=strict)
    _check_forms(receipt, errors)
    _check_signature_fields(receipt, errors, warnings)
    _check_grant(receipt, decision, errors)
    if decision == "ESCALATE" and "approval_id" not in receipt:
        errors.append("an ESCALATE must carry approval_id (what to follow for the outcome)")
    if strict:
        errors += [f"missing field {name!r}" for name in _STRICT_REQUIRED if name not in receipt]
    return ShapeVerdict(tuple(errors), tuple(warnings))


def _decision(receipt: dict[str, Any], errors: list[str]) -> str | None:
    if "decision" not in receipt:
        errors.append("missing field 'decision'")
        return None
    decision = receipt["decision"]
    if decision not in DECISIONS:
        errors.append(f"decision {decision!r} is not PERMIT, DENY, SILENCE or ESCALATE")
        return None
    return str(decision)


def _check_enforcement(receipt: dict[str, Any], decision: str | None, errors: list[str]) -> None:
    if decision is None or "enforcement" not in receipt:
        return
    if receipt["enforcement"] != _ENFORCEMENT[decision]:
        errors.append(f"enforcement of a {decision} must be {_ENFORCEMENT[decision]}")


def _check_expiry(
    receipt: dict[str, Any],
    decision: str | None,
    timestamp: datetime | None,
    errors: list[str],
    warnings: list[str],
    *,
    strict: bool,
) -> None:
    if "expires_at" not in receipt:
        if decision == "PERMIT":
            message = "a PERMIT must carry expires_at"
            if strict:
                errors.append(message)
            else:
                warnings.append("a PERMIT without expires_at states no end to its validity")
        return
    if decision in _SHOWN_REASON:
        errors.append(f"a {decision} carries no expires_at (it is PERMIT only)")
    expires_at = _timestamp(receipt, "expires_at", errors, required=False)
    if timestamp is not None and expires_at is not None and expires_at <= timestamp:
        errors.append("expires_at must be after timestamp")


def _check_reason_code(
    receipt: dict[str, Any],
    decision: str | None,
    errors: list[str],
    warnings: list[str],
    *,
    strict: bool,
) -> None:
    for name in ("reason_code", "reasonCode"):
        if name in receipt and not _is_code(receipt[name]):
            errors.append(f"{name} must be a code such as POLICY_VIOLATION (A-Z, 0-9, _)")
    if decision is None:
        return
    if decision == "PERMIT":
        if "reason_code" in receipt:
            errors.append("a PERMIT carries no reason_code (it explains a DENY or SILENCE)")
        return
    code = receipt.get("reason_code")
    shown = _SHOWN_REASON[decision]
    if code is None:
        warnings.append(f"a {decision} without reason_code does not say why it was blocked")
    elif strict and code != shown:
        errors.append(f"reason_code of a {decision} must be {shown}")
    elif code in _SHOWN_REASON.values() and code != shown:
        warnings.append(f"reason_code {code} is the code shown for another decision")


def _check_grant(receipt: dict[str, Any], decision: str | None, errors: list[str]) -> None:
    """A bound grant (docs/receipts.md, "Constraints"): ``constraints`` a non-empty object,
    ``single_use`` the literal ``true`` (omitted when false); on a PERMIT or an ESCALATE."""
    present = [name for name in ("constraints", "single_use") if name in receipt]
    if present and decision in ("DENY", "SILENCE"):
        errors.append(f"a {decision} carries no {' or '.join(present)} (a PERMIT's bound grant)")
    constraints = receipt.get("constraints")
    if "constraints" in receipt and (not isinstance(constraints, dict) or not constraints):
        errors.append("constraints must be a non-empty JSON object (omitted when none)")
    if "single_use" in receipt and receipt["single_use"] is not True:
        errors.append("single_use must be true (omitted when false)")


def _check_forms(receipt: dict[str, Any], errors: list[str]) -> None:
    for name, pattern in _FORMATS.items():
        value = receipt.get(name)
        if value is not None and (not isinstance(value, str) or not pattern.match(value)):
            errors.append(f"{name} is not of the form {pattern.pattern}")
    for name in _TEXT_FIELDS:
        if name in receipt and not isinstance(receipt[name], str):
            errors.append(f"{name} must be a string")


def _check_signature_fields(
    receipt: dict[str, Any], errors: list[str], warnings: list[str]
) -> None:
    signature = receipt.get("signature")
    authority = receipt.get("authoritySignature")
    if signature is not None and authority is not None and signature != authority:
        errors.append("authoritySignature differs from signature")
    if signature is None and authority is None:
        warnings.append("no signature: the receipt's authenticity cannot be checked")
    elif "key_id" not in receipt:
        warnings.append("no key_id: no published key is named to verify the signature with")


def _is_code(value: object) -> bool:
    return isinstance(value, str) and len(value) <= _CODE_MAX and bool(_CODE.match(value))


def _timestamp(
    receipt: dict[str, Any], name: str, errors: list[str], *, required: bool
) -> datetime | None:
    if name not in receipt:
        if required:
            errors.append(f"missing field {name!r}")
        return None
    try:
        return parse_timestamp(receipt[name])
    except (ValueError, TypeError):
        errors.append(f"{name} is not an ISO 8601 date-time with a time zone")
        return None
