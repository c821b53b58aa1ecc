"""The offline verifier (execauth.verify): a receipt and a key list in, a verdict out.

Receipts and key lists are built here with ``cryptography`` and ``rfc8785`` directly, so
the verifier is checked against the documented format rather than against the signer.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from execauth.verify import (
    KeyListError,
    PublishedKey,
    key_id_for,
    parse_key_list,
    unmet_expectations,
    verify_receipt,
)

ISSUED = datetime(2026, 3, 14, 12, 0, 0, tzinfo=UTC)
KEY_CREATED = datetime(2026, 1, 1, tzinfo=UTC)
UNSIGNED = ("signature", "authoritySignature", "receiptHash")


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _raw(private_key: Ed25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _key_id(private_key: Ed25519PrivateKey) -> str:
    return "service_key_" + hashlib.sha256(_raw(private_key)).hexdigest()[:16]


def _entry(
    private_key: Ed25519PrivateKey,
    *,
    created_at: datetime = KEY_CREATED,
    expires_at: datetime | None = None,
    status: str = "active",
) -> dict[str, Any]:
    spki = private_key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    key_id = _key_id(private_key)
    return {
        "id": key_id,
        "key_id": key_id,
        "algorithm": "Ed25519",
        "public_key": base64.b64encode(spki).decode(),
        "created_at": _ts(created_at),
        "expires_at": _ts(expires_at) if expires_at is not None else None,
        "status": status,
    }


def _keys(*entries: dict[str, Any]) -> dict[str, PublishedKey]:
    keys, _ = parse_key_list({"keys": list(entries), "issuer": "https://authz.example.com"})
    return keys


def _sign(receipt: dict[str, Any], private_key: Ed25519PrivateKey) -> dict[str, Any]:
    body = {k: v for k, v in receipt.items() if k not in UNSIGNED}
    payload = rfc8785.dumps(body)
    signature = "ed25519:" + base64.b64encode(private_key.sign(payload)).decode()
    return {
        **body,
        "signature": signature,
        "authoritySignature": signature,
        "receiptHash": "sha256:" + hashlib.sha256(payload).hexdigest(),
    }


def _receipt(
    private_key: Ed25519PrivateKey,
    *,
    decision: str = "PERMIT",
    timestamp: datetime = ISSUED,
    ttl: timedelta = timedelta(minutes=15),
) -> dict[str, Any]:
    receipt: dict[str, Any] = {
        "receipt_id": "service_rcpt_0123456789abcdef",
        "execution_id": "service_exec_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "decision": decision,
        "enforcement": "EXECUTED" if decision == "PERMIT" else "BLOCKED",
        "surface": "deploy.production",
        "actor": "release-bot",
        "org_id": "org_01hzzzzzzzzzzzzzzzzzzzzzzz",
        "issuer": "https://authz.example.com",
        "timestamp": _ts(timestamp),
        "policy_id": "deploys",
        "policy_version": 1,
        "policy_hash": "sha256:" + "ab" * 32,
        "rule_id": "main-only",
        "request_digest": "sha256:" + "cd" * 32,
        "key_id": _key_id(private_key),
    }
    if decision == "PERMIT":
        receipt["expires_at"] = _ts(timestamp + ttl)
    else:
        receipt["reason_code"] = "POLICY_VIOLATION"
        receipt["reasonCode"] = "SERVICE_POLICY_DENIED"
        receipt["message"] = "denied"
    return _sign(receipt, private_key)


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def test_key_id_is_service_key_and_16_hex_of_sha256_of_the_raw_key(
    key: Ed25519PrivateKey,
) -> None:
    assert key_id_for(_raw(key)) == _key_id(key)


@pytest.mark.parametrize("decision", ["PERMIT", "DENY", "SILENCE"])
def test_authentic_receipt_is_valid(key: Ed25519PrivateKey, decision: str) -> None:
    verdict = verify_receipt(_receipt(key, decision=decision), _keys(_entry(key)), now=ISSUED)
    assert verdict.authentic
    assert verdict.reason == "valid"
    assert verdict.key_id == _key_id(key)
    assert verdict.decision == decision
    assert verdict.usable


def test_tampered_receipt_is_bad_signature(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    receipt["surface"] = "deploy.staging"
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "bad_signature"
    assert not verdict.usable


def test_decision_flipped_to_permit_is_not_authentic(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key, decision="DENY")
    receipt["decision"] = "PERMIT"
    receipt["enforcement"] = "EXECUTED"
    receipt["expires_at"] = _ts(ISSUED + timedelta(hours=1))
    assert not verify_receipt(receipt, _keys(_entry(key)), now=ISSUED).authentic


def test_signature_of_another_key_is_bad_signature(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    forged = _sign(receipt, Ed25519PrivateKey.generate())
    forged["key_id"] = receipt["key_id"]
    verdict = verify_receipt(forged, _keys(_entry(key)), now=ISSUED)
    assert verdict.reason == "bad_signature"


def test_receipt_signed_by_a_key_not_in_the_list_is_unknown_key(key: Ed25519PrivateKey) -> None:
    other = Ed25519PrivateKey.generate()
    verdict = verify_receipt(_receipt(key), _keys(_entry(other)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "unknown_key"


def test_empty_key_list_verifies_nothing(key: Ed25519PrivateKey) -> None:
    assert verify_receipt(_receipt(key), _keys(), now=ISSUED).reason == "unknown_key"


def test_receipt_of_a_revoked_key_is_not_authentic(key: Ed25519PrivateKey) -> None:
    verdict = verify_receipt(_receipt(key), _keys(_entry(key, status="revoked")), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "revoked_key"


def test_receipt_of_a_retired_key_within_its_window_is_authentic(key: Ed25519PrivateKey) -> None:
    entry = _entry(key, expires_at=ISSUED + timedelta(seconds=1), status="retired")
    verdict = verify_receipt(_receipt(key), _keys(entry), now=ISSUED + timedelta(days=1))
    assert verdict.authentic


def test_receipt_dated_before_the_key_was_created_is_outside_its_window(
    key: Ed25519PrivateKey,
) -> None:
    entry = _entry(key, created_at=ISSUED + timedelta(milliseconds=1))
    verdict = verify_receipt(_receipt(key), _keys(entry), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "key_not_valid_at_timestamp"


def test_receipt_dated_at_the_keys_creation_is_inside_its_window(key: Ed25519PrivateKey) -> None:
    verdict = verify_receipt(_receipt(key), _keys(_entry(key, created_at=ISSUED)), now=ISSUED)
    assert verdict.authentic


def test_receipt_dated_at_the_keys_expiry_is_outside_its_window(key: Ed25519PrivateKey) -> None:
    verdict = verify_receipt(_receipt(key), _keys(_entry(key, expires_at=ISSUED)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "key_not_valid_at_timestamp"


def test_receipt_dated_just_before_the_keys_expiry_is_inside_its_window(
    key: Ed25519PrivateKey,
) -> None:
    entry = _entry(key, expires_at=ISSUED + timedelta(milliseconds=1))
    assert verify_receipt(_receipt(key), _keys(entry), now=ISSUED).authentic


def test_expired_permit_is_authentic_but_not_usable(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key, ttl=timedelta(minutes=10))
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=ISSUED + timedelta(minutes=10))
    assert verdict.authentic
    assert verdict.reason == "valid"
    assert verdict.expired
    assert not verdict.usable


def test_permit_is_usable_until_just_before_expires_at(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key, ttl=timedelta(minutes=10))
    now = ISSUED + timedelta(minutes=10) - timedelta(milliseconds=1)
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=now)
    assert not verdict.expired
    assert verdict.usable


def test_deny_never_expires(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key, decision="DENY")
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=ISSUED + timedelta(days=365))
    assert verdict.authentic
    assert not verdict.expired


def test_receipt_from_another_issuer_is_refused_when_an_issuer_is_expected(
    key: Ed25519PrivateKey,
) -> None:
    verdict = verify_receipt(
        _receipt(key), _keys(_entry(key)), now=ISSUED, issuer="https://other.example.com"
    )
    assert not verdict.authentic
    assert verdict.reason == "issuer_mismatch"


def test_receipt_from_the_expected_issuer_is_authentic(key: Ed25519PrivateKey) -> None:
    verdict = verify_receipt(
        _receipt(key), _keys(_entry(key)), now=ISSUED, issuer="https://authz.example.com"
    )
    assert verdict.authentic


def test_authority_signature_that_differs_from_signature_is_refused(
    key: Ed25519PrivateKey,
) -> None:
    receipt = _receipt(key)
    receipt["authoritySignature"] = _receipt(key, decision="DENY")["signature"]
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "signature_fields_disagree"


def test_wrong_receipt_hash_is_refused(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    receipt["receiptHash"] = "sha256:" + "0" * 64
    verdict = verify_receipt(receipt, _keys(_entry(key)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason == "receipt_hash_mismatch"


def test_receipt_without_receipt_hash_still_verifies(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    del receipt["receiptHash"]
    assert verify_receipt(receipt, _keys(_entry(key)), now=ISSUED).authentic


_FIXED_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))


def _malformed_receipts() -> list[object]:
    good = _receipt(_FIXED_KEY)
    cases: list[object] = [None, [], "receipt", 42, 1.5, {}, [good]]
    for field, value in [
        ("key_id", None),
        ("key_id", 7),
        ("signature", None),
        ("signature", 7),
        ("signature", "rsa:abc"),
        ("signature", "ed25519:"),
        ("signature", "ed25519:!!!not-base64!!!"),
        ("signature", "ed25519:" + base64.b64encode(b"short").decode()),
        ("timestamp", None),
        ("timestamp", 1700000000),
        ("timestamp", "yesterday"),
        ("timestamp", "2026-03-14T12:00:00"),  # no time zone
        ("decision", "BLOCK"),
        ("decision", None),
        ("decision", ["PERMIT"]),
        ("expires_at", None),
        ("expires_at", "soon"),
        ("expires_at", 5),
        ("policy_version", 2**64),  # cannot be canonicalized
        ("policy_version", float("nan")),
        ("message", b"bytes"),
    ]:
        mutated = dict(good)
        if value is None:
            mutated.pop(field, None)
        else:
            mutated[field] = value
        cases.append(mutated)
    return cases


@pytest.mark.parametrize("receipt", _malformed_receipts())
def test_malformed_input_never_raises_and_is_never_authentic(receipt: object) -> None:
    verdict = verify_receipt(receipt, _keys(_entry(_FIXED_KEY)), now=ISSUED)
    assert not verdict.authentic
    assert verdict.reason != "valid"


def test_the_unmodified_fixed_receipt_is_authentic() -> None:
    # Guards the table above: its cases fail because of their mutation, not the base receipt.
    assert verify_receipt(_receipt(_FIXED_KEY), _keys(_entry(_FIXED_KEY)), now=ISSUED).authentic


def test_key_list_without_keys_array_is_a_key_list_error() -> None:
    with pytest.raises(KeyListError):
        parse_key_list({"issuer": "https://authz.example.com"})


def test_key_list_returns_its_issuer(key: Ed25519PrivateKey) -> None:
    _, issuer = parse_key_list({"keys": [_entry(key)], "issuer": "https://authz.example.com"})
    assert issuer == "https://authz.example.com"


def test_key_whose_id_does_not_match_its_bytes_vouches_for_nothing(
    key: Ed25519PrivateKey,
) -> None:
    # An attacker relabels their own key with the id of the real one.
    attacker = Ed25519PrivateKey.generate()
    entry = _entry(attacker)
    entry["id"] = entry["key_id"] = _key_id(key)
    receipt = _sign(_receipt(key), attacker)
    assert _keys(entry) == {}
    assert verify_receipt(receipt, _keys(entry), now=ISSUED).reason == "unknown_key"


def test_lowercase_algorithm_of_variant_b_is_accepted(key: Ed25519PrivateKey) -> None:
    entry = _entry(key)
    entry["algorithm"] = "ed25519"
    del entry["id"]
    assert verify_receipt(_receipt(key), _keys(entry), now=ISSUED).authentic


def test_key_entry_with_only_variant_a_id_is_accepted(key: Ed25519PrivateKey) -> None:
    entry = _entry(key)
    del entry["key_id"]
    assert verify_receipt(_receipt(key), _keys(entry), now=ISSUED).authentic


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("algorithm", "RS256"),
        ("public_key", "not base64!"),
        ("public_key", base64.b64encode(b"garbage").decode()),
        ("public_key", 12),
        ("created_at", "long ago"),
        ("created_at", None),
        ("id", "service_key_0000000000000000"),
    ],
)
def test_malformed_key_entries_are_skipped(
    key: Ed25519PrivateKey, field: str, value: object
) -> None:
    entry = _entry(key)
    if value is None:
        del entry[field]
    else:
        entry[field] = value
    assert _keys(entry) == {}


def test_non_object_key_entries_are_skipped(key: Ed25519PrivateKey) -> None:
    keys, _ = parse_key_list({"keys": ["x", 3, None, _entry(key)]})
    assert list(keys) == [_key_id(key)]


def test_matching_receipt_has_no_unmet_expectations(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    assert (
        unmet_expectations(
            receipt,
            surface="deploy.production",
            actor="release-bot",
            request_digest="sha256:" + "cd" * 32,
        )
        == []
    )


@pytest.mark.parametrize(
    ("expectation", "value"),
    [
        ("surface", "deploy.staging"),
        ("actor", "mallory"),
        ("request_digest", "sha256:" + "00" * 32),
    ],
)
def test_each_mismatch_is_an_unmet_expectation(
    key: Ed25519PrivateKey, expectation: str, value: str
) -> None:
    problems = unmet_expectations(_receipt(key), **{expectation: value})
    assert len(problems) == 1
    assert expectation in problems[0]


def test_all_mismatches_are_reported_together(key: Ed25519PrivateKey) -> None:
    problems = unmet_expectations(
        _receipt(key), surface="a.b", actor="mallory", request_digest="sha256:00"
    )
    assert len(problems) == 3


def test_expected_actor_missing_from_the_receipt_is_unmet(key: Ed25519PrivateKey) -> None:
    receipt = _receipt(key)
    del receipt["actor"]
    assert unmet_expectations(receipt, actor="release-bot") != []


def test_no_expectations_means_nothing_unmet(key: Ed25519PrivateKey) -> None:
    assert unmet_expectations(_receipt(key)) == []


def _spki_with_unknown_algorithm() -> str:
    # SEQUENCE { SEQUENCE { OID 1.2.3.4 }, BIT STRING (32 bytes) }: a key type no one supports.
    algorithm = bytes([0x30, 0x05, 0x06, 0x03, 0x2A, 0x03, 0x04])
    bits = bytes([0x03, 0x21, 0x00]) + b"\x01" * 32
    body = algorithm + bits
    return base64.b64encode(bytes([0x30, len(body)]) + body).decode()


def test_key_entry_of_an_unsupported_key_type_is_skipped(key: Ed25519PrivateKey) -> None:
    # A key list may one day carry keys of a newer algorithm; the verifier must skip them,
    # not fail on the whole list.
    unknown = _entry(key)
    unknown["public_key"] = _spki_with_unknown_algorithm()
    keys, _ = parse_key_list({"keys": [unknown, _entry(key)]})
    assert list(keys) == [_key_id(key)]
