"""POST /protocol/verify-receipt (shape) and /protocol/verify-signature (docs/receipts.md)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Tenant

pytestmark = pytest.mark.anyio

PERMIT = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}


@pytest.fixture
async def receipt(client: httpx.AsyncClient, tenant: Tenant) -> dict[str, Any]:
    response = await client.post("/v1/execute", json=PERMIT, headers=tenant.auth)
    body: dict[str, Any] = response.json()
    return body


async def test_real_receipt_has_a_valid_shape(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    response = await client.post("/protocol/verify-receipt", json=receipt)
    assert response.status_code == 200
    assert response.json() == {"valid": True, "errors": [], "warnings": []}


async def test_real_receipt_passes_the_strict_check(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    response = await client.post("/protocol/verify-receipt?strict=true", json=receipt)
    assert response.json() == {"valid": True, "errors": [], "warnings": []}


async def test_decision_and_timestamp_alone_are_a_valid_shape(client: httpx.AsyncClient) -> None:
    minimal = {"decision": "PERMIT", "timestamp": "2026-01-01T00:00:00.000Z"}
    body = (await client.post("/protocol/verify-receipt", json=minimal)).json()
    assert body["valid"] is True
    assert body["errors"] == []
    assert any("signature" in warning for warning in body["warnings"])


async def test_variant_b_silence_body_without_signature_or_key_id_is_a_valid_shape(
    client: httpx.AsyncClient,
) -> None:
    silence = {
        "decision": "SILENCE",
        "enforcement": "BLOCKED",
        "receipt_id": "service_rcpt_0123456789abcdef",
        "surface": "deploy.production",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "reason_code": "INDETERMINATE_EVALUATION",
        "message": "required context field environment is missing",
    }
    body = (await client.post("/protocol/verify-receipt", json=silence)).json()
    assert (body["valid"], body["errors"]) == (True, [])


async def test_variant_b_deny_with_signature_but_no_key_id_is_a_valid_shape_with_a_warning(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    deny = {
        "decision": "DENY",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "reason_code": "POLICY_VIOLATION",
        "signature": receipt["signature"],
    }
    body = (await client.post("/protocol/verify-receipt", json=deny)).json()
    assert body["valid"] is True
    assert any("key_id" in warning for warning in body["warnings"])


async def test_deny_with_its_own_reason_code_is_a_valid_shape(client: httpx.AsyncClient) -> None:
    deny = {
        "decision": "DENY",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "reason_code": "SERVICE_POLICY_WRONG_BRANCH",
    }
    body = (await client.post("/protocol/verify-receipt", json=deny)).json()
    assert (body["valid"], body["errors"]) == (True, [])


@pytest.mark.parametrize("code", ["policy violation", "", "POLICY__X", 7, "A" * 129])
async def test_reason_code_that_is_not_code_shaped_is_invalid(
    client: httpx.AsyncClient, code: object
) -> None:
    deny = {"decision": "DENY", "timestamp": "2026-01-01T00:00:00.000Z", "reason_code": code}
    body = (await client.post("/protocol/verify-receipt", json=deny)).json()
    assert body["valid"] is False
    assert any("reason_code" in error for error in body["errors"])


@pytest.mark.parametrize(
    ("missing", "expected"), [("decision", "decision"), ("timestamp", "timestamp")]
)
async def test_decision_and_timestamp_are_required(
    client: httpx.AsyncClient, missing: str, expected: str
) -> None:
    minimal = {"decision": "PERMIT", "timestamp": "2026-01-01T00:00:00.000Z"}
    del minimal[missing]
    body = (await client.post("/protocol/verify-receipt", json=minimal)).json()
    assert body["valid"] is False
    assert any(expected in error for error in body["errors"])


@pytest.mark.parametrize(
    "record",
    [
        {"decision": "PERMIT", "timestamp": "2026-01-01T00:00:00.000Z"},
        {"decision": "DENY", "timestamp": "2026-01-01T00:00:00.000Z", "reason_code": "OWN_CODE"},
    ],
    ids=["minimal-permit", "deny-with-own-code"],
)
async def test_strict_check_demands_a_full_receipt_of_this_service(
    client: httpx.AsyncClient, record: dict[str, Any]
) -> None:
    body = (await client.post("/protocol/verify-receipt?strict=true", json=record)).json()
    assert body["valid"] is False


async def test_strict_parameter_other_than_true_or_false_is_400(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    response = await client.post("/protocol/verify-receipt?strict=yes", json=receipt)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"decision": "DENY", "enforcement": "EXECUTED"}, "enforcement"),
        ({"decision": "DENY", "expires_at": "2026-01-01T00:10:00.000Z"}, "expires_at"),
        ({"decision": "PERMIT", "expires_at": "2025-12-31T23:59:59.000Z"}, "expires_at"),
        ({"decision": "PERMIT", "reason_code": "POLICY_VIOLATION"}, "reason_code"),
        ({"decision": "PERMIT", "key_id": "key-1"}, "key_id"),
        ({"decision": "PERMIT", "signature": "ed25519:short"}, "signature"),
        ({"decision": "PERMIT", "surface": 5}, "surface"),
    ],
    ids=[
        "deny-executed",
        "deny-with-expiry",
        "expiry-before-timestamp",
        "permit-with-reason",
        "key-id-form",
        "signature-form",
        "surface-type",
    ],
)
async def test_fields_present_are_checked_for_consistency(
    client: httpx.AsyncClient, record: dict[str, Any], expected: str
) -> None:
    body = (
        await client.post(
            "/protocol/verify-receipt", json={**record, "timestamp": "2026-01-01T00:00:00.000Z"}
        )
    ).json()
    assert body["valid"] is False
    assert any(expected in error for error in body["errors"])


async def test_shape_check_needs_no_credentials_and_accepts_a_wrapped_receipt(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    response = await client.post("/protocol/verify-receipt", json={"receipt": receipt})
    assert response.json()["valid"] is True


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"decision": "BLOCK"}, "decision"),
        ({"enforcement": "BLOCKED"}, "enforcement"),
        ({"timestamp": "yesterday"}, "timestamp"),
        ({"expires_at": None}, "expires_at"),
        ({"receipt_id": "rcpt_1"}, "receipt_id"),
        ({"reason_code": "POLICY_VIOLATION"}, "reason_code"),
    ],
)
async def test_strict_shape_check_reports_each_inconsistency_of_a_real_receipt(
    client: httpx.AsyncClient, receipt: dict[str, Any], change: dict[str, Any], expected: str
) -> None:
    tampered = {**receipt, **change}
    if change.get("expires_at", "") is None:
        del tampered["expires_at"]
    body = (await client.post("/protocol/verify-receipt?strict=true", json=tampered)).json()
    assert body["valid"] is False
    assert any(expected in error for error in body["errors"])


async def test_signature_check_accepts_a_real_receipt(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    body = (await client.post("/protocol/verify-signature", json=receipt)).json()
    assert body["valid"] is True
    assert body["key_id"] == receipt["key_id"]
    assert body["reason"] == "valid"


async def test_signature_check_rejects_a_tampered_receipt(
    client: httpx.AsyncClient, receipt: dict[str, Any]
) -> None:
    tampered = {**receipt, "actor": "mallory"}
    body = (await client.post("/protocol/verify-signature", json=tampered)).json()
    assert body["valid"] is False
    assert body["reason"] == "bad_signature"


@pytest.mark.parametrize("path", ["/protocol/verify-receipt", "/protocol/verify-signature"])
@pytest.mark.parametrize(
    "garbage", [b"null", b"[]", b"42", b'"x"', b'{"key_id": 5, "signature": []}', b"\xff\xfe"]
)
async def test_protocol_endpoints_never_fail_on_garbage(
    client: httpx.AsyncClient, path: str, garbage: bytes
) -> None:
    response = await client.post(
        path, content=garbage, headers={"content-type": "application/json"}
    )
    assert response.status_code in (200, 400)
    if response.status_code == 200:
        assert response.json()["valid"] is False
