"""GET /.well-known/service-keys.json and /.well-known/jwks.json (docs/receipts.md, "Key lists")."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_der_public_key,
)

from execauth.keyring import ROTATION_OVERLAP, generate_signing_key
from execauth.serving.runtime import Runtime
from execauth.wire_time import format_timestamp, truncate_to_millis

pytestmark = pytest.mark.anyio


async def test_key_list_is_public_and_cacheable_for_an_hour(client: httpx.AsyncClient) -> None:
    response = await client.get("/.well-known/service-keys.json")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "public, max-age=3600"
    assert response.headers["access-control-allow-origin"] == "*"
    body = response.json()
    assert body["cache_ttl"] == 3600
    assert body["issuer"] == "https://execauth.test"


async def test_key_entries_carry_variant_a_and_b_fields(client: httpx.AsyncClient) -> None:
    (entry,) = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    assert entry["id"] == entry["key_id"]
    assert entry["algorithm"] == "Ed25519"
    assert entry["status"] == "active"
    assert entry["created_at"].endswith("Z")
    assert "expires_at" not in entry  # optional, not null (docs/receipts.md): no successor yet


async def test_key_id_is_derived_from_the_public_key(client: httpx.AsyncClient) -> None:
    (entry,) = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    key = load_der_public_key(base64.b64decode(entry["public_key"]))
    assert isinstance(key, Ed25519PublicKey)
    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert entry["key_id"] == "service_key_" + hashlib.sha256(raw).hexdigest()[:16]


async def test_jwks_publishes_the_same_keys_as_okp(client: httpx.AsyncClient) -> None:
    keys = (await client.get("/.well-known/service-keys.json")).json()["keys"]
    response = await client.get("/.well-known/jwks.json")
    assert response.headers["cache-control"] == "public, max-age=3600"
    (jwk,) = response.json()["keys"]
    assert jwk["kty"] == "OKP"
    assert jwk["crv"] == "Ed25519"
    assert jwk["kid"] == keys[0]["key_id"]
    spki_key = load_der_public_key(base64.b64decode(keys[0]["public_key"]))
    assert isinstance(spki_key, Ed25519PublicKey)
    raw = spki_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert base64.urlsafe_b64decode(jwk["x"] + "=") == raw


async def test_rotation_publishes_both_keys_and_signs_with_the_new_one(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    from tests.conftest import make_tenant

    tenant = await make_tenant(client)
    body = {"surface": "deploy.production", "actor": "release-bot", "context": {"branch": "main"}}
    old_receipt = (await client.post("/v1/execute", json=body, headers=tenant.auth)).json()
    now = datetime.now(UTC)
    new_key = generate_signing_key(runtime.secret, now)
    runtime.signing_keys.rotate(new_key, now + ROTATION_OVERLAP, "test", now=now)
    runtime.keyring.refresh(datetime.now(UTC))
    new_receipt = (await client.post("/v1/execute", json=body, headers=tenant.auth)).json()
    assert new_receipt["key_id"] == new_key.key_id
    assert old_receipt["key_id"] != new_key.key_id
    listed = {
        k["key_id"]: k for k in (await client.get("/.well-known/service-keys.json")).json()["keys"]
    }
    assert set(listed) == {old_receipt["key_id"], new_key.key_id}
    assert listed[old_receipt["key_id"]]["expires_at"] is not None
    for receipt in (old_receipt, new_receipt):
        verdict = await client.post("/protocol/verify-signature", json=receipt)
        assert verdict.json()["valid"] is True


async def test_key_past_its_retirement_is_listed_active_with_its_end_as_expires_at(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    # Variant B's status enum is active | revoked: a client validating it must not
    # refuse the whole list because one key's window has ended.
    now = truncate_to_millis(datetime.now(UTC))
    (old,) = runtime.keyring.records
    runtime.signing_keys.rotate(generate_signing_key(runtime.secret, now), now, "test", now=now)
    runtime.keyring.refresh(now + timedelta(seconds=1))
    listed = {
        k["key_id"]: k for k in (await client.get("/.well-known/service-keys.json")).json()["keys"]
    }
    assert listed[old.key_id]["status"] == "active"
    assert listed[old.key_id]["expires_at"] == format_timestamp(now)
    assert {k["status"] for k in listed.values()} == {"active"}


async def test_revoked_key_is_listed_as_revoked_and_left_out_of_jwks(
    client: httpx.AsyncClient, runtime: Runtime
) -> None:
    now = datetime.now(UTC)
    (old,) = runtime.keyring.records
    runtime.signing_keys.insert_key(generate_signing_key(runtime.secret, now))
    runtime.signing_keys.revoke(old.key_id, now, "test")
    runtime.keyring.refresh(datetime.now(UTC))
    listed = {
        k["key_id"]: k for k in (await client.get("/.well-known/service-keys.json")).json()["keys"]
    }
    assert listed[old.key_id]["status"] == "revoked"
    jwks_ids = {k["kid"] for k in (await client.get("/.well-known/jwks.json")).json()["keys"]}
    assert old.key_id not in jwks_ids
    assert len(jwks_ids) == 1
