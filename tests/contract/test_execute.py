"""POST /v1/execute, row by row of docs/api.md ("POST /v1/execute") and docs/receipts.md."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key

from tests.conftest import Tenant

pytestmark = pytest.mark.anyio

PERMIT_BODY = {
    "surface": "deploy.production",
    "actor": "release-bot",
    "context": {"branch": "main"},
}


async def execute(
    client: httpx.AsyncClient, tenant: Tenant, body: Any, **headers: str
) -> httpx.Response:
    return await client.post("/v1/execute", json=body, headers={**tenant.auth, **headers})


async def published_key(client: httpx.AsyncClient, key_id: str) -> Ed25519PublicKey:
    keys = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    entry = next(k for k in keys if k["key_id"] == key_id)
    key = load_der_public_key(base64.b64decode(entry["public_key"]))
    assert isinstance(key, Ed25519PublicKey)
    return key


def signed_payload(receipt: dict[str, Any]) -> bytes:
    unsigned = {
        k: v
        for k, v in receipt.items()
        if k not in {"signature", "authoritySignature", "receiptHash"}
    }
    return rfc8785.dumps(unsigned)


async def test_permit_receipt_verifies_with_the_published_key(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await execute(client, tenant, PERMIT_BODY)
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["decision"] == "PERMIT"
    key = await published_key(client, receipt["key_id"])
    signature = base64.b64decode(receipt["signature"].removeprefix("ed25519:"))
    key.verify(signature, signed_payload(receipt))  # raises if invalid
    assert receipt["authoritySignature"] == receipt["signature"]
    digest = hashlib.sha256(signed_payload(receipt)).hexdigest()
    assert receipt["receiptHash"] == "sha256:" + digest


async def test_execute_alias_without_v1_prefix_answers_the_same(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await client.post("/execute", json=PERMIT_BODY, headers=tenant.auth)
    assert response.status_code == 200
    assert response.json()["decision"] == "PERMIT"


async def test_permit_receipt_carries_every_documented_field(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    receipt = (await execute(client, tenant, {**PERMIT_BODY, "request_id": "r-1"})).json()
    assert receipt["receipt_id"].startswith("service_rcpt_")
    assert len(receipt["receipt_id"]) == len("service_rcpt_") + 16
    assert receipt["execution_id"].startswith("service_exec_")
    assert len(receipt["execution_id"]) == len("service_exec_") + 26
    assert receipt["enforcement"] == "EXECUTED"
    assert receipt["surface"] == "deploy.production"
    assert receipt["actor"] == "release-bot"
    assert receipt["org_id"] == tenant.org_id
    assert receipt["issuer"] == "https://execauth.test"
    assert receipt["policy_id"] == "deploys"
    assert receipt["policy_version"] == 1
    assert receipt["policy_hash"].startswith("sha256:")
    assert receipt["rule_id"] == "main-only"
    assert receipt["request_id"] == "r-1"
    assert receipt["key_id"].startswith("service_key_")
    assert "reason_code" not in receipt
    assert "reasonCode" not in receipt
    assert "message" not in receipt


async def test_timestamps_are_rfc3339_utc_with_milliseconds(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    receipt = (await execute(client, tenant, PERMIT_BODY)).json()
    for field in ("timestamp", "expires_at"):
        value = receipt[field]
        assert value.endswith("Z")
        assert len(value) == len("2026-01-01T00:00:00.000Z")


async def test_permit_expires_after_the_rule_ttl(client: httpx.AsyncClient, tenant: Tenant) -> None:
    from execauth.wire_time import parse_timestamp

    receipt = (await execute(client, tenant, PERMIT_BODY)).json()
    lifetime = parse_timestamp(receipt["expires_at"]) - parse_timestamp(receipt["timestamp"])
    assert lifetime.total_seconds() == 600


async def test_request_digest_covers_the_normalized_request(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    receipt = (await execute(client, tenant, PERMIT_BODY)).json()
    normalized = {
        "surface": "deploy.production",
        "action": None,
        "actor": "release-bot",
        "context": {"branch": "main"},
        "payload": {},
    }
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(normalized)).hexdigest()
    assert receipt["request_digest"] == expected


async def test_deny_receipt_is_signed_and_names_the_rule_and_reason(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**PERMIT_BODY, "context": {"branch": "feature"}}
    response = await execute(client, tenant, body)
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["decision"] == "DENY"
    assert receipt["enforcement"] == "BLOCKED"
    assert receipt["reason_code"] == "POLICY_VIOLATION"
    assert receipt["reasonCode"] == "SERVICE_POLICY_WRONG_BRANCH"
    assert receipt["message"] == "Only main can be deployed"
    assert receipt["rule_id"] == "wrong-branch"
    assert "expires_at" not in receipt
    key = await published_key(client, receipt["key_id"])
    key.verify(base64.b64decode(receipt["signature"][8:]), signed_payload(receipt))


async def test_missing_required_context_is_silence(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await execute(client, tenant, {"surface": "deploy.production", "actor": "x"})
    receipt = response.json()
    assert response.status_code == 200
    assert receipt["decision"] == "SILENCE"
    assert receipt["enforcement"] == "BLOCKED"
    assert receipt["reason_code"] == "INDETERMINATE_EVALUATION"
    assert receipt["reasonCode"] == "SERVICE_POLICY_MISSING_CONTEXT"
    key = await published_key(client, receipt["key_id"])
    key.verify(base64.b64decode(receipt["signature"][8:]), signed_payload(receipt))


async def test_condition_error_is_silence(client: httpx.AsyncClient, tenant: Tenant) -> None:
    receipt = (await execute(client, tenant, {"surface": "deploy.staging"})).json()
    assert receipt["decision"] == "SILENCE"
    assert receipt["reasonCode"] == "SERVICE_POLICY_EVALUATION_ERROR"
    assert receipt["rule_id"] == "even-amount"


async def test_permit_and_deny_both_matching_is_silence(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {"surface_id": "deploy.staging", "payload": {"amount": 3}}
    receipt = (await execute(client, tenant, body)).json()
    assert receipt["decision"] == "SILENCE"
    assert receipt["reasonCode"] == "SERVICE_POLICY_CONFLICT"


async def test_actor_is_omitted_when_not_given(client: httpx.AsyncClient, tenant: Tenant) -> None:
    body = {"surface": "deploy.staging", "payload": {"amount": 2}}
    receipt = (await execute(client, tenant, body)).json()
    assert receipt["decision"] == "PERMIT"
    assert "actor" not in receipt
    assert "request_id" not in receipt


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {"surface": "deploy.production", "actor": "release-bot",
             "metadata": {"branch": "main"}, "request_id": "a-1"},
            id="variant-A",
        ),
        pytest.param(
            {"surface": "deploy.production", "action": "rollout", "actor": "release-bot",
             "context": {"branch": "main"}, "idempotency_key": "b-1"},
            id="variant-B",
        ),
        pytest.param(
            {"surface": "deploy.production", "actorId": "release-bot",
             "context": {"branch": "main"}},
            id="variant-C",
        ),
        pytest.param(
            {"surface_id": "deploy.production", "action": "rollout", "actorId": "release-bot",
             "payload": {"amount": 10, "currency": "EUR"}, "context": {"branch": "main"}},
            id="variant-D",
        ),
    ],
)  # fmt: skip
async def test_every_input_variant_is_accepted(
    client: httpx.AsyncClient, tenant: Tenant, body: dict[str, Any]
) -> None:
    response = await execute(client, tenant, body)
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert receipt["decision"] == "PERMIT"
    assert receipt["actor"] == "release-bot"
    if "action" in body:
        assert receipt["action"] == "rollout"


async def test_metadata_and_context_are_merged_for_policy(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = {**PERMIT_BODY, "metadata": {"ticket": "CHG-1"}, "context": {"branch": "main"}}
    assert (await execute(client, tenant, body)).json()["decision"] == "PERMIT"


async def test_unknown_top_level_fields_are_ignored(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    response = await execute(client, tenant, {**PERMIT_BODY, "colour": "blue"})
    assert response.json()["decision"] == "PERMIT"


async def test_receipt_is_stored_byte_for_byte_before_the_answer(
    client: httpx.AsyncClient, tenant: Tenant, runtime: Any
) -> None:
    for body in (
        PERMIT_BODY,
        {**PERMIT_BODY, "context": {"branch": "x"}},
        {"surface": "deploy.production"},
    ):
        response = await execute(client, tenant, body)
        execution_id = response.json()["execution_id"]
        assert runtime.executions.receipt_bytes(tenant.org_id, execution_id) == response.content
