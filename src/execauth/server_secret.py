"""The server secret (``EXECAUTH_SECRET_KEY``) and the purpose-bound keys derived from it.

One secret protects several things; HKDF with a distinct ``info`` per purpose keeps
them independent, so that e.g. the API-key hashing key reveals nothing about the
key that seals signing keys at rest.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MIN_SECRET_LENGTH = 32


class ServerSecret:
    """Derives purpose-bound 32-byte keys from the configured secret."""

    def __init__(self, secret: str) -> None:
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"EXECAUTH_SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters of "
                "high-entropy text, e.g. from "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        self._secret = secret.encode()
        self._cache: dict[str, bytes] = {}

    def derive(self, purpose: str) -> bytes:
        """The 32-byte key for ``purpose`` (stable for a given secret)."""
        key = self._cache.get(purpose)
        if key is None:
            key = HKDF(
                algorithm=hashes.SHA256(), length=32, salt=b"execauth", info=purpose.encode()
            ).derive(self._secret)
            self._cache[purpose] = key
        return key

    def keyed_hash(self, purpose: str, value: str) -> str:
        """HMAC-SHA256 of ``value`` under the key for ``purpose``, hex encoded."""
        return hmac.new(self.derive(purpose), value.encode(), hashlib.sha256).hexdigest()
