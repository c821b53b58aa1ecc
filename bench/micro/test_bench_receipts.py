"""The per-request CPU work around the decision: normalize + digest, build, JCS + sign."""

from __future__ import annotations

from typing import Any

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from execauth.keyring import ActiveSigner
from execauth.policy.decision import Decision, Outcome, PolicyRef
from execauth.receipts import (
    build_receipt,
    new_execution_id,
    new_receipt_id,
    sign_receipt,
    signing_payload,
)
from execauth.request import parse_execute_request

from .conftest import NOW

POLICY = PolicyRef("bench", 1, "sha256:" + "ab" * 32)
PERMIT = Decision(Outcome.PERMIT, "release-from-main", None, None, 600)
SIGNER = ActiveSigner("service_key_0123456789abcdef", Ed25519PrivateKey.generate())


def unsigned(body: dict[str, Any]) -> dict[str, Any]:
    return build_receipt(
        receipt_id=new_receipt_id(),
        execution_id=new_execution_id(NOW),
        request=parse_execute_request(body, "bench-1"),
        decision=PERMIT,
        policy=POLICY,
        org_id="org_01bench",
        issuer="http://127.0.0.1:8080",
        now=NOW,
        key_id=SIGNER.key_id,
    )


def test_parse_request(benchmark: Any, body: dict[str, Any]) -> None:
    """Normalize the wire body; includes the RFC 8785 request digest."""
    benchmark(parse_execute_request, body, "bench-1")


def test_build_receipt(benchmark: Any, body: dict[str, Any]) -> None:
    request = parse_execute_request(body, "bench-1")
    benchmark(
        build_receipt,
        receipt_id=new_receipt_id(),
        execution_id=new_execution_id(NOW),
        request=request,
        decision=PERMIT,
        policy=POLICY,
        org_id="org_01bench",
        issuer="http://127.0.0.1:8080",
        now=NOW,
        key_id=SIGNER.key_id,
    )


def test_canonicalize_receipt(benchmark: Any, body: dict[str, Any]) -> None:
    """RFC 8785 of the signed fields (the bytes the signature covers)."""
    benchmark(signing_payload, unsigned(body))


def test_ed25519_sign(benchmark: Any, body: dict[str, Any]) -> None:
    benchmark(SIGNER.sign, signing_payload(unsigned(body)))


def test_sign_receipt(benchmark: Any, body: dict[str, Any]) -> None:
    """``sign_receipt``: JCS + Ed25519 + SHA-256 receiptHash."""
    receipt = unsigned(body)
    benchmark(sign_receipt, receipt, SIGNER)


def test_request_to_response_bytes(benchmark: Any, body: dict[str, Any]) -> None:
    """All of the above plus encoding the response body, as one request does it."""

    def one() -> bytes:
        signed, _ = sign_receipt(unsigned(body), SIGNER)
        return msgspec.json.encode(signed)

    benchmark(one)
