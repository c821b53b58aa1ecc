"""Receipts: build the receipt (docs/receipts.md), canonicalize it, sign it.

Pure: no clock, no database, no HTTP. The caller passes ``now`` and the signer.
The signed payload is ``JCS(receipt minus UNSIGNED_FIELDS)`` (RFC 8785); the
offline verifier (``execauth.verify``) recomputes exactly this.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from ulid import ULID

from execauth.canonical import canonical_json
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.random_pool import random_bytes
from execauth.receipt_format import SIGNATURE_PREFIX as SIGNATURE_PREFIX  # re-exported
from execauth.receipt_format import UNSIGNED_FIELDS as UNSIGNED_FIELDS  # re-exported
from execauth.request import ExecuteRequest
from execauth.wire_time import epoch_millis, format_timestamp

RECEIPT_ID_PREFIX = "service_rcpt_"
EXECUTION_ID_PREFIX = "service_exec_"
APPROVAL_ID_PREFIX = "service_appr_"
# Fields an outcome receipt copies from the ESCALATE receipt it answers: the same request.
_LINKED_FIELDS = (
    "surface", "action", "actor", "org_id", "issuer", "policy_id", "policy_version",
    "policy_hash", "rule_id",
)  # fmt: skip


class Signer(Protocol):
    """Anything that signs with a published Ed25519 key."""

    @property
    def key_id(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


# Draws of a receipt id for one receipt before giving up (a 503). A draw is taken with
# odds of about one in a million at thousands of receipts a second (``new_receipt_id``).
RECEIPT_ID_DRAWS = 3
_RECEIPT_ID_TIME_BITS = 42  # milliseconds since the Unix epoch, until the year 2109
_RECEIPT_ID_RANDOM_BITS = 64 - _RECEIPT_ID_TIME_BITS


def new_receipt_id(now: datetime) -> str:
    """``service_rcpt_`` and 16 hex: the decision's millisecond (42 bits), then 22 random bits.

    Why time first: the database indexes every receipt id, and a random id lands on a
    leaf page of its own in that index, which each commit then writes out; ids that
    follow time fill the index's last pages together (21 against 14 KiB written a
    receipt, docs/performance.md). Why that is safe: a receipt id is a name, never a
    secret (every read of a receipt is scoped to its organization's API key), and it is
    unique because the database refuses a second one: the rare receipt whose id is
    taken is signed again under a new one (``ReceiptIdTaken``, docs/decisions.md).
    """
    millis = epoch_millis(now) & ((1 << _RECEIPT_ID_TIME_BITS) - 1)
    randomness = int.from_bytes(random_bytes(3)) >> (24 - _RECEIPT_ID_RANDOM_BITS)
    return f"{RECEIPT_ID_PREFIX}{millis << _RECEIPT_ID_RANDOM_BITS | randomness:016x}"


def new_execution_id(now: datetime) -> str:
    """A ULID: 48 bits of milliseconds since the epoch, then 80 random bits."""
    return EXECUTION_ID_PREFIX + str(
        ULID.from_bytes(epoch_millis(now).to_bytes(6, "big") + random_bytes(10))
    )


def approval_id_for(execution_id: str) -> str:
    """The approval an ESCALATE execution opens: one per execution, named after it."""
    return APPROVAL_ID_PREFIX + execution_id.removeprefix(EXECUTION_ID_PREFIX)


def execution_id_for(approval_id: str) -> str:
    return EXECUTION_ID_PREFIX + approval_id.removeprefix(APPROVAL_ID_PREFIX)


def signing_payload(receipt: Mapping[str, Any]) -> bytes:
    """The exact bytes the signature covers: RFC 8785 JSON of the signed fields."""
    return canonical_json({k: v for k, v in receipt.items() if k not in UNSIGNED_FIELDS})


def build_receipt(
    *,
    receipt_id: str,
    execution_id: str,
    request: ExecuteRequest,
    decision: Decision,
    policy: PolicyRef,
    org_id: str,
    issuer: str,
    now: datetime,
    key_id: str,
) -> dict[str, Any]:
    """The unsigned receipt, fields in the documented order (docs/receipts.md, "Fields")."""
    receipt: dict[str, Any] = {
        "receipt_id": receipt_id,
        "execution_id": execution_id,
        "decision": decision.outcome.value,
        "enforcement": decision.enforcement,
        "surface": request.surface,
    }
    if request.action is not None:
        receipt["action"] = request.action
    if request.actor is not None:
        receipt["actor"] = request.actor
    receipt["org_id"] = org_id
    receipt["issuer"] = issuer
    receipt["timestamp"] = format_timestamp(now)
    if decision.outcome is Outcome.PERMIT:
        assert decision.ttl_seconds is not None  # the engine always sets it on PERMIT
        receipt["expires_at"] = format_timestamp(now + timedelta(seconds=decision.ttl_seconds))
    receipt["policy_id"] = policy.policy_id
    receipt["policy_version"] = policy.version
    receipt["policy_hash"] = policy.policy_hash
    receipt["rule_id"] = decision.rule_id
    if decision.outcome in (Outcome.PERMIT, Outcome.ESCALATE):
        # The bound grant, signed like every field (docs/receipts.md): an ESCALATE shows
        # its approvers what the PERMIT will be bound to, and the PERMIT copies it.
        _grant(receipt, decision.constraints, decision.single_use)
    if decision.outcome is not Outcome.PERMIT:
        receipt["reason_code"] = decision.reason_category
        receipt["reasonCode"] = decision.reason
        receipt["message"] = decision.message
    if decision.outcome is Outcome.ESCALATE:
        assert decision.escalation is not None  # the engine always sets it on ESCALATE
        approval_id = approval_id_for(execution_id)
        wait = timedelta(seconds=decision.escalation.approval_ttl_seconds)
        receipt["approval_id"] = approval_id
        receipt["approval_expires_at"] = format_timestamp(now + wait)
        receipt["approval_quorum"] = decision.escalation.quorum
        receipt["approval_url"] = f"{issuer.rstrip('/')}/v1/approvals/{approval_id}"
    if request.idempotency_key is not None:
        receipt["request_id"] = request.idempotency_key
    receipt["request_digest"] = request.digest
    receipt["key_id"] = key_id
    return receipt


def build_outcome_receipt(
    escalation: Mapping[str, Any],
    *,
    receipt_id: str,
    execution_id: str,
    outcome: str,
    approvers: list[dict[str, Any]],
    now: datetime,
    permit_ttl_seconds: int,
    key_id: str,
) -> dict[str, Any]:
    """The final answer to an ESCALATE receipt (docs/approvals.md): ``outcome`` is
    ``approved`` (a PERMIT), ``rejected`` or ``expired`` (a DENY), linked to it by
    ``approval_id`` and ``escalation_receipt_id`` and naming who approved, and when."""
    permitted = outcome == "approved"
    receipt: dict[str, Any] = {
        "receipt_id": receipt_id,
        "execution_id": execution_id,
        "decision": "PERMIT" if permitted else "DENY",
        "enforcement": "EXECUTED" if permitted else "BLOCKED",
    }
    for name in _LINKED_FIELDS[:4]:
        if name in escalation:
            receipt[name] = escalation[name]
    receipt["issuer"] = escalation["issuer"]
    receipt["timestamp"] = format_timestamp(now)
    if permitted:
        receipt["expires_at"] = format_timestamp(now + timedelta(seconds=permit_ttl_seconds))
    for name in _LINKED_FIELDS[5:]:
        receipt[name] = escalation[name]
    if permitted:
        # The escalate rule's bound grant, as the signed ESCALATE stated it.
        constraints = escalation.get("constraints")
        _grant(
            receipt,
            constraints if isinstance(constraints, Mapping) else None,
            escalation.get("single_use") is True,
        )
    else:
        reason = "SERVICE_POLICY_APPROVAL_" + ("REJECTED" if outcome == "rejected" else "EXPIRED")
        receipt["reason_code"] = "POLICY_VIOLATION"
        receipt["reasonCode"] = reason
        receipt["message"] = f"approval {escalation['approval_id']} was {outcome}"
    receipt["approval_id"] = escalation["approval_id"]
    receipt["approval_outcome"] = outcome
    receipt["escalation_receipt_id"] = escalation["receipt_id"]
    receipt["approvers"] = approvers
    if "request_id" in escalation:
        receipt["request_id"] = escalation["request_id"]
    receipt["request_digest"] = escalation["request_digest"]
    receipt["key_id"] = key_id
    return receipt


def _grant(
    receipt: dict[str, Any], constraints: Mapping[str, Any] | None, single_use: bool
) -> None:
    """``constraints`` and ``single_use``, each omitted when it binds nothing."""
    if constraints:
        receipt["constraints"] = dict(constraints)
    if single_use:
        receipt["single_use"] = True


def sign_receipt(unsigned: Mapping[str, Any], signer: Signer) -> tuple[dict[str, Any], bytes]:
    """Sign ``unsigned``; return the complete receipt and the signed payload bytes."""
    if unsigned.get("key_id") != signer.key_id:
        raise ValueError("receipt names a different key than the signer's")
    payload = signing_payload(unsigned)
    signature = SIGNATURE_PREFIX + base64.b64encode(signer.sign(payload)).decode("ascii")
    signed = dict(unsigned)
    signed["signature"] = signature
    signed["authoritySignature"] = signature
    signed["receiptHash"] = "sha256:" + hashlib.sha256(payload).hexdigest()
    return signed, payload
