"""Signing keys (execauth.keyring): status over time, choosing the signer, sealing, publication."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_der_public_key

from execauth.keyring import (
    KEY_LIST_CACHE_TTL,
    ActiveSigner,
    KeyUnsealError,
    SigningKeyRecord,
    choose_signing_key,
    generate_signing_key,
    jwks_document,
    key_list_document,
    needs_replacement,
    seal_private_key,
    unseal_signer,
)
from execauth.server_secret import ServerSecret

NOW = datetime(2026, 3, 14, 12, 0, 0, 123_456, tzinfo=UTC)
SECRET = ServerSecret("s" * 40)
OTHER_SECRET = ServerSecret("t" * 40)


def _record(
    created_at: datetime = NOW,
    retired_at: datetime | None = None,
    revoked_at: datetime | None = None,
) -> SigningKeyRecord:
    record = generate_signing_key(SECRET, created_at)
    return dataclasses.replace(record, retired_at=retired_at, revoked_at=revoked_at)


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- generation ------------------------------------------------------------------------------


def test_generated_key_id_is_derived_from_its_public_key() -> None:
    record = generate_signing_key(SECRET, NOW)
    assert record.key_id == "service_key_" + hashlib.sha256(record.public_key).hexdigest()[:16]


def test_generated_key_is_32_raw_bytes_and_created_at_millisecond_precision() -> None:
    record = generate_signing_key(SECRET, NOW)
    assert len(record.public_key) == 32
    assert record.created_at == NOW.replace(microsecond=123_000)


def test_generated_keys_are_distinct() -> None:
    assert generate_signing_key(SECRET, NOW).key_id != generate_signing_key(SECRET, NOW).key_id


def test_private_key_is_not_stored_in_clear() -> None:
    record = generate_signing_key(SECRET, NOW)
    raw_private = bytes(unseal_signer(SECRET, record)._signing_key)  # the 32-byte seed
    assert raw_private not in record.sealed_private_key


# --- status over time ------------------------------------------------------------------------


def test_new_key_is_active() -> None:
    assert _record().status() == "active"


def test_key_past_its_retirement_is_still_published_as_active() -> None:
    # Variant B's enum is active | revoked; the retirement is told by expires_at.
    record = _record(retired_at=NOW + timedelta(seconds=60))
    assert record.status() == "active"


def test_key_signs_until_just_before_its_retirement_time() -> None:
    record = _record(retired_at=NOW + timedelta(seconds=60))
    assert record.can_sign_at(NOW + timedelta(seconds=60) - timedelta(microseconds=1))
    assert not record.can_sign_at(NOW + timedelta(seconds=60))


def test_revoked_key_is_revoked_whatever_its_retirement() -> None:
    record = _record(retired_at=NOW, revoked_at=NOW + timedelta(seconds=1))
    assert record.status() == "revoked"


def test_active_key_can_sign_from_its_creation() -> None:
    record = _record()
    assert not record.can_sign_at(record.created_at - timedelta(milliseconds=1))
    assert record.can_sign_at(record.created_at)


@pytest.mark.parametrize(
    "record",
    [
        _record(retired_at=NOW),
        _record(revoked_at=NOW),
    ],
    ids=["retired", "revoked"],
)
def test_retired_or_revoked_key_cannot_sign(record: SigningKeyRecord) -> None:
    assert not record.can_sign_at(NOW + timedelta(seconds=1))


# --- choosing the signer ---------------------------------------------------------------------


def test_no_keys_means_nothing_may_be_signed() -> None:
    assert choose_signing_key([], NOW) is None


def test_only_revoked_or_retired_keys_means_nothing_may_be_signed() -> None:
    records = [_record(revoked_at=NOW), _record(retired_at=NOW)]
    assert choose_signing_key(records, NOW + timedelta(seconds=1)) is None


def test_newest_usable_key_signs() -> None:
    old = _record(created_at=NOW - timedelta(days=30))
    new = _record(created_at=NOW - timedelta(days=1))
    assert choose_signing_key([new, old], NOW) == new
    assert choose_signing_key([old, new], NOW) == new


def test_key_created_in_the_future_does_not_sign_yet() -> None:
    current = _record(created_at=NOW - timedelta(days=1))
    future = _record(created_at=NOW + timedelta(hours=1))
    assert choose_signing_key([current, future], NOW) == current


def test_revoked_newer_key_is_passed_over_for_an_older_active_one() -> None:
    old = _record(created_at=NOW - timedelta(days=30))
    new = _record(created_at=NOW - timedelta(days=1), revoked_at=NOW - timedelta(hours=1))
    assert choose_signing_key([old, new], NOW) == old


def test_rotated_key_keeps_signing_during_the_overlap_only_until_retirement() -> None:
    old = _record(created_at=NOW - timedelta(days=30), retired_at=NOW + timedelta(seconds=60))
    assert choose_signing_key([old], NOW) == old
    assert choose_signing_key([old], NOW + timedelta(seconds=60)) is None


# --- sealing ---------------------------------------------------------------------------------


def test_seal_and_unseal_roundtrip_gives_a_signer_for_the_published_key() -> None:
    record = generate_signing_key(SECRET, NOW)
    signer = unseal_signer(SECRET, record)
    assert signer.key_id == record.key_id
    signature = signer.sign(b"message")
    Ed25519PublicKey.from_public_bytes(record.public_key).verify(signature, b"message")


def test_signer_gives_the_rfc_8032_signature_for_the_rfc_8032_key() -> None:
    # RFC 8032, section 7.1, TEST 3: the signer goes through libsodium, the keys
    # through cryptography; both must be the one Ed25519.
    secret = bytes.fromhex("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7")
    signature = bytes.fromhex(
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
        "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"
    )
    signer = ActiveSigner("service_key_rfc8032", Ed25519PrivateKey.from_private_bytes(secret))
    assert signer.sign(bytes.fromhex("af82")) == signature


def test_unseal_with_a_different_server_secret_fails() -> None:
    record = generate_signing_key(SECRET, NOW)
    with pytest.raises(KeyUnsealError):
        unseal_signer(OTHER_SECRET, record)


def test_sealed_key_moved_to_another_key_id_fails_to_open() -> None:
    first = generate_signing_key(SECRET, NOW)
    second = generate_signing_key(SECRET, NOW)
    swapped = dataclasses.replace(second, sealed_private_key=first.sealed_private_key)
    with pytest.raises(KeyUnsealError):
        unseal_signer(SECRET, swapped)


def test_sealed_key_relabelled_with_another_key_id_fails_to_open() -> None:
    record = generate_signing_key(SECRET, NOW)
    relabelled = dataclasses.replace(record, key_id="service_key_0000000000000000")
    with pytest.raises(KeyUnsealError):
        unseal_signer(SECRET, relabelled)


def test_altered_sealed_key_fails_to_open() -> None:
    record = generate_signing_key(SECRET, NOW)
    sealed = bytearray(record.sealed_private_key)
    sealed[-1] ^= 0x01
    with pytest.raises(KeyUnsealError):
        unseal_signer(SECRET, dataclasses.replace(record, sealed_private_key=bytes(sealed)))


def test_sealed_key_whose_public_half_was_replaced_is_refused() -> None:
    record = generate_signing_key(SECRET, NOW)
    other = generate_signing_key(SECRET, NOW)
    with pytest.raises(KeyUnsealError):
        unseal_signer(SECRET, dataclasses.replace(record, public_key=other.public_key))


def test_sealing_twice_gives_different_ciphertexts() -> None:
    # A fresh nonce per seal: AES-GCM must never reuse one under the same key.
    key = Ed25519PrivateKey.generate()
    first = seal_private_key(SECRET, "service_key_0123456789abcdef", key)
    second = seal_private_key(SECRET, "service_key_0123456789abcdef", key)
    assert first != second


# --- publication -----------------------------------------------------------------------------


def test_key_list_document_has_keys_issuer_and_an_hour_of_cache_ttl() -> None:
    document = key_list_document([_record()], "https://authz.example.com")
    assert set(document) == {"keys", "issuer", "cache_ttl"}
    assert document["issuer"] == "https://authz.example.com"
    assert document["cache_ttl"] == KEY_LIST_CACHE_TTL == 3600


def test_key_list_entry_carries_variant_a_and_b_fields() -> None:
    record = _record()
    (entry,) = key_list_document([record], "https://authz.example.com")["keys"]
    assert set(entry) == {"id", "key_id", "algorithm", "public_key", "created_at", "status"}
    assert entry["id"] == entry["key_id"] == record.key_id
    assert entry["algorithm"] == "Ed25519"
    assert entry["created_at"] == "2026-03-14T12:00:00.123Z"
    assert entry["status"] == "active"


def test_key_list_public_key_is_base64_spki_der_of_the_raw_key() -> None:
    record = _record()
    (entry,) = key_list_document([record], "https://authz.example.com")["keys"]
    public_key = load_der_public_key(base64.b64decode(entry["public_key"], validate=True))
    assert isinstance(public_key, Ed25519PublicKey)
    assert public_key.public_bytes(Encoding.Raw, PublicFormat.Raw) == record.public_key


def test_retired_key_is_listed_active_with_its_retirement_as_expires_at() -> None:
    record = _record(retired_at=NOW + timedelta(seconds=60))
    (entry,) = key_list_document([record], "https://authz.example.com")["keys"]
    assert entry["status"] == "active"
    assert entry["expires_at"] == "2026-03-14T12:01:00.123Z"


@pytest.mark.parametrize(
    "record",
    [_record(), _record(retired_at=NOW), _record(revoked_at=NOW)],
    ids=["signing", "retired", "revoked"],
)
def test_listed_status_is_always_in_the_published_enum(record: SigningKeyRecord) -> None:
    (entry,) = key_list_document([record], "https://authz.example.com")["keys"]
    assert entry["status"] in {"active", "revoked"}


def test_revoked_key_is_listed_as_revoked() -> None:
    record = _record(revoked_at=NOW + timedelta(seconds=5))
    (entry,) = key_list_document([record], "https://authz.example.com")["keys"]
    assert entry["status"] == "revoked"
    assert entry["expires_at"] == "2026-03-14T12:00:05.123Z"


def test_jwks_publishes_each_unrevoked_key_as_an_rfc8037_okp_key() -> None:
    record = _record()
    (jwk,) = jwks_document([record])["keys"]
    assert jwk["kty"] == "OKP"
    assert jwk["crv"] == "Ed25519"
    assert jwk["alg"] == "EdDSA"
    assert jwk["use"] == "sig"
    assert jwk["kid"] == record.key_id
    assert "=" not in jwk["x"]
    assert _b64url_decode(jwk["x"]) == record.public_key


def test_jwks_omits_revoked_keys_but_keeps_retired_ones() -> None:
    active = _record()
    retired = _record(retired_at=NOW)
    revoked = _record(revoked_at=NOW)
    kids = [k["kid"] for k in jwks_document([active, retired, revoked])["keys"]]
    assert kids == [active.key_id, retired.key_id]


# --- revocation ----------------------------------------------------------------------------


def test_revoking_the_only_active_key_needs_a_replacement() -> None:
    only = _record()
    assert needs_replacement([only], only.key_id, NOW + timedelta(seconds=1))


def test_revoking_a_key_mid_rotation_needs_no_replacement() -> None:
    old = _record(retired_at=NOW + timedelta(seconds=60))
    new = _record(created_at=NOW)
    assert not needs_replacement([old, new], old.key_id, NOW + timedelta(seconds=1))


def test_revoking_a_retired_key_needs_no_replacement() -> None:
    old = _record(retired_at=NOW)
    new = _record(created_at=NOW)
    assert not needs_replacement([old, new], old.key_id, NOW + timedelta(hours=1))
