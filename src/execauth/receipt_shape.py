"""The stateless shape check behind ``POST /protocol/verify-receipt`` (spec §4.3).

It checks form, not authenticity: decision and enforcement agree, timestamps are
RFC 3339, identifiers have their documented forms. The signature is checked by
``execauth.verify``.
"""

from __future__ import annotations

import re
from typing import Any

from execauth.wire_time import parse_timestamp

_FORMATS = {
    "receipt_id": re.compile(r"^service_rcpt_[0-9a-f]{16}\Z"),
    "execution_id": re.compile(r"^service_exec_[0-9A-HJKMNP-TV-Z]{26}\Z"),
    "key_id": re.compile(r"^service_key_[0-9a-f]{16}\Z"),
    "signature": re.compile(r"^ed25519:[A-Za-z0-9+/]{86}==\Z"),
    "receiptHash": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
    "request_digest": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
    "policy_hash": re.compile(r"^sha256:[0-9a-f]{64}\Z"),
}
_ENFORCEMENT = {"PERMIT": "EXECUTED", "DENY": "BLOCKED", "SILENCE": "BLOCKED"}
_REASON = {"DENY": "POLICY_VIOLATION", "SILENCE": "INDETERMINATE_EVALUATION"}
_REQUIRED = ("receipt_id", "decision", "enforcement", "surface", "timestamp", "signature", "key_id")


def check_receipt_shape(receipt: Any) -> list[str]:
    """Every shape problem of ``receipt``; an empty list means well-formed."""
    if not isinstance(receipt, dict):
        return ["receipt must be a JSON object"]
    errors = [f"missing field {name!r}" for name in _REQUIRED if name not in receipt]
    decision = receipt.get("decision")
    if "decision" in receipt and decision not in _ENFORCEMENT:
        errors.append(f"decision {decision!r} is not PERMIT, DENY or SILENCE")
    if (
        decision in _ENFORCEMENT
        and receipt.get("enforcement", _ENFORCEMENT[decision]) != (_ENFORCEMENT[decision])
    ):
        errors.append(f"enforcement of a {decision} must be {_ENFORCEMENT[decision]}")
    if decision in _REASON and receipt.get("reason_code") not in (None, _REASON[decision]):
        errors.append(f"reason_code of a {decision} must be {_REASON[decision]}")
    if decision == "PERMIT" and "reason_code" in receipt:
        errors.append("a PERMIT carries no reason_code")
    for name, pattern in _FORMATS.items():
        value = receipt.get(name)
        if value is not None and (not isinstance(value, str) or not pattern.match(value)):
            errors.append(f"{name} is not of the form {pattern.pattern}")
    if receipt.get("authoritySignature", receipt.get("signature")) != receipt.get("signature"):
        errors.append("authoritySignature differs from signature")
    timestamp = _timestamp(receipt, "timestamp", errors)
    if decision == "PERMIT":
        if "expires_at" not in receipt:
            errors.append("a PERMIT must carry expires_at")
        expires_at = _timestamp(receipt, "expires_at", errors)
        if timestamp and expires_at and expires_at <= timestamp:
            errors.append("expires_at must be after timestamp")
    elif "expires_at" in receipt and decision in _REASON:
        errors.append(f"a {decision} carries no expires_at")
    return errors


def _timestamp(receipt: dict[str, Any], name: str, errors: list[str]) -> Any:
    value = receipt.get(name)
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except (ValueError, TypeError):
        errors.append(f"{name} is not an RFC 3339 date-time with a time zone")
        return None
