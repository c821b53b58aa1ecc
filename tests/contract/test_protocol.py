"""POST /protocol/verify-receipt (shape) and /protocol/verify-signature (spec §4.3, §4.4)."""

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
    assert response.json() == {"valid": True, "errors": []}


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
async def test_shape_check_reports_each_inconsistency(
    client: httpx.AsyncClient, receipt: dict[str, Any], change: dict[str, Any], expected: str
) -> None:
    tampered = {**receipt, **change}
    if change.get("expires_at", "") is None:
        del tampered["expires_at"]
    body = (await client.post("/protocol/verify-receipt", json=tampered)).json()
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
    response = await client.post(path, content=garbage)
    assert response.status_code in (200, 400)
    if response.status_code == 200:
        assert response.json()["valid"] is False
