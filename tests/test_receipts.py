"""Receipts (execauth.receipts): the receipt of docs/receipts.md, its payload and signature.

The signature is checked here along an independent path: ``rfc8785`` and
``cryptography``'s ``Ed25519PublicKey`` directly, never ``execauth.verify``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from ulid import ULID

from execauth.policy.decision import Decision, Outcome, PolicyRef, Reason
from execauth.receipt_shape import check_receipt_shape
from execauth.receipts import (
    build_receipt,
    new_execution_id,
    new_receipt_id,
    sign_receipt,
    signing_payload,
)
from execauth.request import ExecuteRequest, parse_execute_request

NOW = datetime(2026, 3, 14, 15, 9, 26, 535_000, tzinfo=UTC)
POLICY = PolicyRef("deploys", 3, "sha256:" + "ab" * 32)
UNSIGNED = ("signature", "authoritySignature", "receiptHash")


class _Signer:
    def __init__(self) -> None:
        self.private_key = Ed25519PrivateKey.generate()
        raw = self.public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._key_id = "service_key_" + hashlib.sha256(raw).hexdigest()[:16]

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def key_id(self) -> str:
        return self._key_id

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)


def _request(**extra: Any) -> ExecuteRequest:
    body: dict[str, Any] = {
        "surface": "deploy.production",
        "actor": "release-bot",
        "action": "rollout",
        "context": {"branch": "main"},
        "payload": {"amount": 10},
        "request_id": "req-1",
    }
    body.update(extra)
    return parse_execute_request({k: v for k, v in body.items() if v is not None}, None)


PERMIT = Decision(Outcome.PERMIT, "main-only", None, None, 600)
DENY = Decision(Outcome.DENY, "wrong-branch", "SERVICE_POLICY_WRONG_BRANCH", "Only main")
SILENCE = Decision(Outcome.SILENCE, None, Reason.MISSING_CONTEXT, "required field missing")


def _unsigned(
    signer: _Signer, decision: Decision = PERMIT, request: ExecuteRequest | None = None
) -> dict[str, Any]:
    return build_receipt(
        receipt_id="service_rcpt_0123456789abcdef",
        execution_id=new_execution_id(NOW),
        request=request if request is not None else _request(),
        decision=decision,
        policy=POLICY,
        org_id="org_01hzzzzzzzzzzzzzzzzzzzzzzz",
        issuer="https://authz.example.com",
        now=NOW,
        key_id=signer.key_id,
    )


def _signed(signer: _Signer, decision: Decision = PERMIT) -> dict[str, Any]:
    receipt, _ = sign_receipt(_unsigned(signer, decision), signer)
    return receipt


def _independently_verifies(receipt: dict[str, Any], public_key: Ed25519PublicKey) -> bool:
    signature = receipt["signature"]
    assert signature.startswith("ed25519:")
    payload = rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED})
    try:
        public_key.verify(base64.b64decode(signature[len("ed25519:") :], validate=True), payload)
    except InvalidSignature:
        return False
    return True


# --- identifiers -----------------------------------------------------------------------------


def test_receipt_id_is_service_rcpt_and_16_lowercase_hex() -> None:
    assert re.fullmatch(r"service_rcpt_[0-9a-f]{16}", new_receipt_id(NOW))


def test_a_receipt_id_begins_with_the_millisecond_of_its_decision() -> None:
    value = int(new_receipt_id(NOW).removeprefix("service_rcpt_"), 16)
    assert value >> 22 == int(NOW.timestamp() * 1000)


def test_receipt_ids_of_later_milliseconds_sort_after_earlier_ones() -> None:
    ids = [new_receipt_id(NOW + timedelta(milliseconds=n)) for n in range(50)]
    assert sorted(ids) == ids


def test_receipt_ids_of_one_millisecond_differ_in_their_random_bits() -> None:
    # 22 random bits: two of 20 draws meet with odds of about 1 in 22,000, two such
    # meetings about 1 in 10^9; fewer than 19 distinct ids means the bits are not drawn.
    assert len({new_receipt_id(NOW) for _ in range(20)}) >= 19


def test_execution_id_is_service_exec_and_a_ulid_of_the_decision_time() -> None:
    execution_id = new_execution_id(NOW)
    assert re.fullmatch(r"service_exec_[0-9A-HJKMNP-TV-Z]{26}", execution_id)
    assert ULID.from_str(execution_id.removeprefix("service_exec_")).datetime == NOW


# --- building --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "enforcement"),
    [(PERMIT, "EXECUTED"), (DENY, "BLOCKED"), (SILENCE, "BLOCKED")],
)
def test_enforcement_follows_the_decision(decision: Decision, enforcement: str) -> None:
    receipt = _unsigned(_Signer(), decision)
    assert receipt["decision"] == decision.outcome.value
    assert receipt["enforcement"] == enforcement


def test_permit_carries_expires_at_now_plus_ttl_and_no_reason() -> None:
    receipt = _unsigned(_Signer(), PERMIT)
    assert receipt["expires_at"] == "2026-03-14T15:19:26.535Z"
    for absent in ("reason_code", "reasonCode", "message"):
        assert absent not in receipt


def test_deny_carries_policy_violation_and_the_rules_detailed_reason() -> None:
    receipt = _unsigned(_Signer(), DENY)
    assert receipt["reason_code"] == "POLICY_VIOLATION"
    assert receipt["reasonCode"] == "SERVICE_POLICY_WRONG_BRANCH"
    assert receipt["message"] == "Only main"
    assert receipt["rule_id"] == "wrong-branch"
    assert "expires_at" not in receipt


def test_silence_carries_indeterminate_evaluation() -> None:
    receipt = _unsigned(_Signer(), SILENCE)
    assert receipt["reason_code"] == "INDETERMINATE_EVALUATION"
    assert receipt["reasonCode"] == "SERVICE_POLICY_MISSING_CONTEXT"
    assert receipt["message"] == "required field missing"
    assert "expires_at" not in receipt


def test_timestamp_is_rfc3339_utc_with_milliseconds_and_z() -> None:
    assert _unsigned(_Signer())["timestamp"] == "2026-03-14T15:09:26.535Z"


def test_receipt_carries_request_policy_and_key_fields() -> None:
    signer = _Signer()
    request = _request()
    receipt = _unsigned(signer, request=request)
    assert receipt["surface"] == "deploy.production"
    assert receipt["action"] == "rollout"
    assert receipt["actor"] == "release-bot"
    assert receipt["request_id"] == "req-1"
    assert receipt["request_digest"] == request.digest
    assert receipt["policy_id"] == "deploys"
    assert receipt["policy_version"] == 3
    assert receipt["policy_hash"] == POLICY.policy_hash
    assert receipt["key_id"] == signer.key_id
    assert receipt["org_id"] == "org_01hzzzzzzzzzzzzzzzzzzzzzzz"
    assert receipt["issuer"] == "https://authz.example.com"


def test_actor_action_and_request_id_are_omitted_when_not_given() -> None:
    request = parse_execute_request({"surface": "deploy.production"}, None)
    receipt = _unsigned(_Signer(), request=request)
    for absent in ("actor", "action", "request_id"):
        assert absent not in receipt


def test_fields_come_in_the_documented_order() -> None:
    receipt = _signed(_Signer(), DENY)
    assert list(receipt) == [
        "receipt_id", "execution_id", "decision", "enforcement", "surface", "action", "actor",
        "org_id", "issuer", "timestamp", "policy_id", "policy_version", "policy_hash", "rule_id",
        "reason_code", "reasonCode", "message", "request_id", "request_digest", "key_id",
        "signature", "authoritySignature", "receiptHash",
    ]  # fmt: skip


# --- signing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("decision", [PERMIT, DENY, SILENCE])
def test_signed_receipt_passes_the_strict_shape_check(decision: Decision) -> None:
    verdict = check_receipt_shape(_signed(_Signer(), decision), strict=True)
    assert (verdict.errors, verdict.warnings) == ((), ())


def test_signing_payload_is_jcs_of_the_receipt_without_unsigned_fields() -> None:
    receipt = _signed(_Signer())
    expected = rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED})
    assert signing_payload(receipt) == expected


def test_sign_receipt_returns_the_payload_it_signed() -> None:
    signer = _Signer()
    unsigned = _unsigned(signer)
    receipt, payload = sign_receipt(unsigned, signer)
    assert payload == rfc8785.dumps(unsigned)
    assert signing_payload(receipt) == payload


@pytest.mark.parametrize("decision", [PERMIT, DENY, SILENCE])
def test_every_decision_is_signed_and_verifies_with_the_public_key(decision: Decision) -> None:
    signer = _Signer()
    receipt = _signed(signer, decision)
    assert receipt["key_id"] == signer.key_id
    assert _independently_verifies(receipt, signer.public_key)


def test_signature_is_ed25519_prefix_and_padded_standard_base64_of_64_bytes() -> None:
    signature = _signed(_Signer())["signature"]
    assert re.fullmatch(r"ed25519:[A-Za-z0-9+/]{86}==", signature)
    assert len(base64.b64decode(signature.removeprefix("ed25519:"), validate=True)) == 64


def test_authority_signature_equals_signature() -> None:
    receipt = _signed(_Signer())
    assert receipt["authoritySignature"] == receipt["signature"]


def test_receipt_hash_is_sha256_of_the_signed_payload() -> None:
    receipt = _signed(_Signer())
    payload = rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED})
    assert receipt["receiptHash"] == "sha256:" + hashlib.sha256(payload).hexdigest()


def test_signature_does_not_verify_with_another_key() -> None:
    assert not _independently_verifies(_signed(_Signer()), _Signer().public_key)


def test_signing_a_receipt_that_names_another_key_is_refused() -> None:
    signer = _Signer()
    unsigned = _unsigned(signer)
    unsigned["key_id"] = _Signer().key_id
    with pytest.raises(ValueError, match="different key"):
        sign_receipt(unsigned, signer)


def test_signing_does_not_modify_the_unsigned_receipt() -> None:
    signer = _Signer()
    unsigned = _unsigned(signer)
    before = dict(unsigned)
    sign_receipt(unsigned, signer)
    assert unsigned == before


_TAMPERED: dict[str, object] = {
    "receipt_id": "service_rcpt_fedcba9876543210",
    "execution_id": "service_exec_01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "decision": "DENY",
    "enforcement": "BLOCKED",
    "surface": "deploy.staging",
    "action": "rollback",
    "actor": "mallory",
    "org_id": "org_01hyyyyyyyyyyyyyyyyyyyyyyy",
    "issuer": "https://evil.example.com",
    "timestamp": "2026-03-14T15:09:26.536Z",
    "expires_at": "2026-03-15T15:19:26.535Z",
    "policy_id": "other",
    "policy_version": 4,
    "policy_hash": "sha256:" + "cd" * 32,
    "rule_id": "other-rule",
    "request_id": "req-2",
    "request_digest": "sha256:" + "00" * 32,
    "key_id": "service_key_0000000000000000",
}


def test_tamper_table_covers_every_signed_field_of_a_permit() -> None:
    receipt = _signed(_Signer(), PERMIT)
    assert set(_TAMPERED) == set(receipt) - set(UNSIGNED)


@pytest.mark.parametrize(("field", "value"), sorted(_TAMPERED.items()))
def test_tampering_any_signed_field_breaks_verification(field: str, value: object) -> None:
    signer = _Signer()
    receipt = _signed(signer, PERMIT)
    assert receipt[field] != value
    receipt[field] = value
    assert not _independently_verifies(receipt, signer.public_key)


@pytest.mark.parametrize("field", ["reason_code", "reasonCode", "message"])
def test_tampering_a_deny_reason_breaks_verification(field: str) -> None:
    signer = _Signer()
    receipt = _signed(signer, DENY)
    receipt[field] = receipt[field] + "x"
    assert not _independently_verifies(receipt, signer.public_key)


def test_removing_a_signed_field_breaks_verification() -> None:
    signer = _Signer()
    receipt = _signed(signer, PERMIT)
    del receipt["expires_at"]
    assert not _independently_verifies(receipt, signer.public_key)


def test_adding_a_field_breaks_verification() -> None:
    signer = _Signer()
    receipt = _signed(signer, DENY)
    receipt["expires_at"] = "2030-01-01T00:00:00.000Z"
    assert not _independently_verifies(receipt, signer.public_key)


def test_changing_unsigned_fields_does_not_change_the_payload() -> None:
    receipt = _signed(_Signer())
    payload = signing_payload(receipt)
    receipt["receiptHash"] = "sha256:" + "0" * 64
    assert signing_payload(receipt) == payload


def test_key_order_of_the_receipt_does_not_change_the_payload() -> None:
    receipt = _signed(_Signer())
    reordered = dict(reversed(list(receipt.items())))
    assert signing_payload(reordered) == signing_payload(receipt)


def test_expires_at_is_later_than_timestamp_by_the_ttl() -> None:
    receipt = _unsigned(_Signer(), Decision(Outcome.PERMIT, "r", None, None, 90))
    issued = datetime.fromisoformat(receipt["timestamp"].replace("Z", "+00:00"))
    expires = datetime.fromisoformat(receipt["expires_at"].replace("Z", "+00:00"))
    assert expires - issued == timedelta(seconds=90)
