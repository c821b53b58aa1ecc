"""API keys: the secret format, its checksum, keyed hashing and what a key may do.

A secret looks like ``service_live_<43 base62 chars><6 base62 chars>``: 256 bits
of randomness followed by a CRC32 checksum of them, as GitHub's tokens do, so a
secret scanner can recognise a real key without asking us and a typo is refused
before any database lookup. Only ``HMAC-SHA256(derived key, secret)`` is stored.
"""

from __future__ import annotations

import json
import secrets
import zlib
from dataclasses import dataclass
from datetime import datetime

from ulid import ULID

from execauth.server_secret import ServerSecret
from execauth.surfaces import compile_surface_pattern

SECRET_PREFIX = "service_live_"  # noqa: S105 - the public prefix, not a secret
ROLES = ("execute", "admin", "auditor")
HASH_PURPOSE = "api-key-hash-v1"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_LENGTH = 43  # ceil(256 / log2(62))
_CHECKSUM_LENGTH = 6


@dataclass(frozen=True, slots=True)
class ApiKey:
    key_id: str
    org_id: str
    name: str
    role: str
    surfaces: tuple[str, ...]  # empty: every surface
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None = None
    rotated_at: datetime | None = None
    previous_valid_until: datetime | None = None  # grace of the secret rotated out last

    def is_usable(self, now: datetime) -> bool:
        if self.revoked_at is not None and self.revoked_at <= now:
            return False
        return self.expires_at is None or now < self.expires_at

    def allows_surface(self, surface: str) -> bool:
        if not self.surfaces:
            return True
        return any(compile_surface_pattern(p).matches(surface) for p in self.surfaces)

    def surfaces_json(self) -> str:
        return json.dumps(list(self.surfaces))


@dataclass(frozen=True, slots=True)
class KeyMatch:
    """A key found by a presented secret: its current one, or the one rotated out."""

    key: ApiKey
    previous: bool

    def is_usable(self, now: datetime) -> bool:
        if not self.key.is_usable(now):
            return False
        if not self.previous:
            return True
        grace = self.key.previous_valid_until
        return grace is not None and now < grace


def _base62(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        number, digit = divmod(number, 62)
        chars.append(_BASE62[digit])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode()), _CHECKSUM_LENGTH)


def new_key_id() -> str:
    return "key_" + str(ULID()).lower()


def generate_secret() -> str:
    """A new ``service_live_`` secret (shown to the caller once, never stored)."""
    body = _base62(secrets.randbits(256), _BODY_LENGTH)
    return SECRET_PREFIX + body + _checksum(body)


def is_well_formed_secret(secret: str) -> bool:
    """Prefix, length, alphabet and checksum: everything checkable without the database."""
    if not secret.startswith(SECRET_PREFIX):
        return False
    rest = secret[len(SECRET_PREFIX) :]
    # ASCII letters and digits are exactly the base62 alphabet (checked in C, per request).
    if len(rest) != _BODY_LENGTH + _CHECKSUM_LENGTH or not (rest.isascii() and rest.isalnum()):
        return False
    body, checksum = rest[:_BODY_LENGTH], rest[_BODY_LENGTH:]
    return secrets.compare_digest(_checksum(body), checksum)


def hash_secret(server_secret: ServerSecret, secret: str) -> str:
    return server_secret.keyed_hash(HASH_PURPOSE, secret)


def validate_surface_patterns(patterns: object) -> tuple[str, ...]:
    """Check a key's allowed-surface list; ``ValueError`` names the bad pattern."""
    if patterns is None:
        return ()
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError("'surfaces' must be a list of surface patterns")
    for pattern in patterns:
        compile_surface_pattern(pattern)
    return tuple(patterns)
