"""API keys (execauth.tenancy.api_keys): secret format, checksum, keyed hashing, permissions."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import zlib
from datetime import UTC, datetime, timedelta

import pytest

from execauth.server_secret import ServerSecret
from execauth.tenancy.api_keys import (
    ApiKey,
    KeyMatch,
    generate_secret,
    hash_secret,
    is_well_formed_secret,
    new_key_id,
    validate_surface_patterns,
)

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
NOW = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
SECRET = ServerSecret("s" * 40)


def _crc32_base62(body: str) -> str:
    """The documented checksum, computed independently: CRC32 of the body in 6 base62 digits."""
    number = zlib.crc32(body.encode())
    digits = ""
    for _ in range(6):
        number, digit = divmod(number, 62)
        digits = BASE62[digit] + digits
    return digits


def _api_key(
    surfaces: tuple[str, ...] = (),
    expires_at: datetime | None = None,
    revoked_at: datetime | None = None,
) -> ApiKey:
    return ApiKey(
        key_id=new_key_id(),
        org_id="org_01hzzzzzzzzzzzzzzzzzzzzzzz",
        name="ci",
        role="execute",
        surfaces=surfaces,
        created_at=NOW - timedelta(days=1),
        expires_at=expires_at,
        revoked_at=revoked_at,
    )


# --- the secret ------------------------------------------------------------------------------


def test_secret_has_the_service_live_prefix_and_a_base62_body() -> None:
    assert re.fullmatch(r"service_live_[0-9A-Za-z]{49}", generate_secret())


def test_secret_body_carries_at_least_256_bits() -> None:
    body = generate_secret().removeprefix("service_live_")[:-6]
    assert len(body) == 43
    assert 62**43 >= 2**256


def test_secret_ends_with_the_crc32_checksum_of_its_body() -> None:
    rest = generate_secret().removeprefix("service_live_")
    assert rest[-6:] == _crc32_base62(rest[:-6])


def test_secrets_are_random() -> None:
    assert len({generate_secret() for _ in range(50)}) == 50


def test_generated_secret_is_well_formed() -> None:
    assert is_well_formed_secret(generate_secret())


def _one_character_changes(secret: str) -> list[str]:
    changed = []
    for index in range(len("service_live_"), len(secret)):
        replacement = "A" if secret[index] != "A" else "B"
        changed.append(secret[:index] + replacement + secret[index + 1 :])
    return changed


def test_every_one_character_change_fails_the_checksum() -> None:
    secret = generate_secret()
    assert not any(is_well_formed_secret(s) for s in _one_character_changes(secret))


@pytest.mark.parametrize(
    "candidate",
    [
        "",
        "service_live_",
        "service_test_" + "A" * 49,
        "SERVICE_LIVE_" + "A" * 49,
        "Bearer service_live_" + "A" * 49,
    ],
)
def test_wrong_prefix_or_empty_secret_is_not_well_formed(candidate: str) -> None:
    assert not is_well_formed_secret(candidate)


def test_secret_with_checksum_but_wrong_length_is_not_well_formed() -> None:
    body = "A" * 42
    assert not is_well_formed_secret("service_live_" + body + _crc32_base62(body))


def test_secret_with_a_non_base62_character_is_not_well_formed() -> None:
    body = "A" * 42 + "_"
    assert not is_well_formed_secret("service_live_" + body + _crc32_base62(body))


def test_secret_with_trailing_whitespace_is_not_well_formed() -> None:
    assert not is_well_formed_secret(generate_secret() + "\n")


def test_handmade_secret_with_a_valid_checksum_is_well_formed() -> None:
    body = "Z" * 43
    assert is_well_formed_secret("service_live_" + body + _crc32_base62(body))


# --- hashing ---------------------------------------------------------------------------------


def test_hash_is_hex_hmac_sha256_and_not_the_secret() -> None:
    secret = generate_secret()
    digest = hash_secret(SECRET, secret)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert secret not in digest


def test_hash_is_stable_for_the_same_server_secret() -> None:
    secret = generate_secret()
    assert hash_secret(SECRET, secret) == hash_secret(ServerSecret("s" * 40), secret)


def test_hash_is_keyed_by_the_server_secret() -> None:
    secret = generate_secret()
    assert hash_secret(SECRET, secret) != hash_secret(ServerSecret("t" * 40), secret)


def test_hash_is_not_a_plain_hash_of_the_secret() -> None:
    secret = generate_secret()
    assert hash_secret(SECRET, secret) != hashlib.sha256(secret.encode()).hexdigest()


def test_hash_uses_a_key_derived_for_api_keys_only() -> None:
    # The seal key for signing keys must not double as the API-key hashing key.
    secret = generate_secret()
    seal_key = SECRET.derive("signing-key-seal-v1")
    assert hash_secret(SECRET, secret) != hmac.new(seal_key, secret.encode(), "sha256").hexdigest()


def test_different_secrets_hash_differently() -> None:
    assert hash_secret(SECRET, generate_secret()) != hash_secret(SECRET, generate_secret())


def test_server_secret_shorter_than_32_characters_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        ServerSecret("s" * 31)


# --- what a key may do -----------------------------------------------------------------------


def test_key_id_is_key_and_a_lowercase_ulid() -> None:
    assert re.fullmatch(r"key_[0-9a-z]{26}", new_key_id())


def test_key_without_surface_list_allows_every_surface() -> None:
    assert _api_key().allows_surface("anything.at.all")


def test_key_allows_only_surfaces_matching_its_patterns() -> None:
    key = _api_key(surfaces=("deploy.*", "data.export"))
    assert key.allows_surface("deploy.staging")
    assert key.allows_surface("data.export")
    assert not key.allows_surface("deploy.staging.eu")
    assert not key.allows_surface("data.import")


def test_key_is_usable_until_it_expires() -> None:
    key = _api_key(expires_at=NOW)
    assert key.is_usable(NOW - timedelta(microseconds=1))
    assert not key.is_usable(NOW)


def test_revoked_key_is_unusable_from_its_revocation() -> None:
    key = _api_key(revoked_at=NOW)
    assert key.is_usable(NOW - timedelta(microseconds=1))
    assert not key.is_usable(NOW)


def test_surface_pattern_list_is_validated() -> None:
    assert validate_surface_patterns(["deploy.*", "data.**"]) == ("deploy.*", "data.**")
    assert validate_surface_patterns(None) == ()


@pytest.mark.parametrize("patterns", ["deploy.*", [1], ["deploy"], ["Deploy.*"], {"a": "b"}])
def test_bad_surface_pattern_list_is_refused(patterns: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the reason varies
        validate_surface_patterns(patterns)


# --- rotation grace --------------------------------------------------------------------------


def test_current_secret_of_a_rotated_key_stays_usable() -> None:
    key = dataclasses.replace(_api_key(), rotated_at=NOW, previous_valid_until=NOW)
    assert KeyMatch(key, previous=False).is_usable(NOW + timedelta(days=1))


def test_rotated_out_secret_is_usable_only_during_its_grace() -> None:
    grace_end = NOW + timedelta(hours=1)
    key = dataclasses.replace(_api_key(), rotated_at=NOW, previous_valid_until=grace_end)
    match = KeyMatch(key, previous=True)
    assert match.is_usable(grace_end - timedelta(microseconds=1))
    assert not match.is_usable(grace_end)


def test_rotated_out_secret_without_a_grace_is_unusable() -> None:
    key = dataclasses.replace(_api_key(), rotated_at=NOW, previous_valid_until=None)
    assert not KeyMatch(key, previous=True).is_usable(NOW)


def test_revocation_ends_the_grace_of_a_rotated_out_secret() -> None:
    key = dataclasses.replace(
        _api_key(revoked_at=NOW), rotated_at=NOW, previous_valid_until=NOW + timedelta(hours=1)
    )
    assert not KeyMatch(key, previous=True).is_usable(NOW + timedelta(minutes=1))
