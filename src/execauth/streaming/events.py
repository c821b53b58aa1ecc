"""Decision events as they leave the service: the envelope, its id, the webhook signature.

Pure: no I/O, no clock (the caller passes ``now``). An event is one entry of an
organization's log: its position (``log_index``) orders it and names it, so a receiver
that sees the same ``id`` twice (delivery is at least once) knows it is a duplicate.
The receipt inside is the exact signed object the client got, verifiable offline.

Webhooks follow the Standard Webhooks scheme (``webhook-id``, ``webhook-timestamp``,
``webhook-signature: v1,<base64 HMAC-SHA256>`` over ``id.timestamp.body``), so receivers
can use the libraries that already exist for it; docs/observability.md shows how.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from execauth.server_secret import ServerSecret
from execauth.wire_time import format_timestamp

EVENT_TYPE = "execauth.decision"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a format prefix, not a secret)


@dataclass(frozen=True, slots=True)
class DecisionEvent:
    org_id: str
    log_index: int
    execution_id: str
    sequenced_at: datetime
    receipt: bytes  # the stored receipt bytes, exactly as answered

    @property
    def event_id(self) -> str:
        """Stable across retries and instances: the org and the position in its log."""
        return f"{self.org_id}:{self.log_index}"

    def envelope(self) -> dict[str, Any]:
        return {
            "id": self.event_id,
            "type": EVENT_TYPE,
            "org_id": self.org_id,
            "log_index": self.log_index,
            "execution_id": self.execution_id,
            "sequenced_at": format_timestamp(self.sequenced_at),
            "receipt": json.loads(self.receipt),
        }

    def encode(self) -> bytes:
        return json.dumps(self.envelope(), separators=(",", ":"), sort_keys=True).encode()


def batch_body(subscription_id: str, events: list[DecisionEvent]) -> bytes:
    """One webhook delivery: the events in log order (OPA ships decision logs in batches too)."""
    body = {"subscription_id": subscription_id, "events": [e.envelope() for e in events]}
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def batch_id(subscription_id: str, events: list[DecisionEvent]) -> str:
    """The delivery's ``webhook-id``: the range it carries (a retry may carry more)."""
    return f"{subscription_id}:{events[0].log_index}-{events[-1].log_index}"


def new_webhook_secret() -> str:
    """``whsec_`` + base64 of 32 random bytes: the Standard Webhooks secret format."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_headers(secret: str, message_id: str, now: datetime, body: bytes) -> dict[str, str]:
    timestamp = int(now.timestamp())
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": webhook_signature(secret, message_id, timestamp, body),
    }


def verify_webhook(
    secret: str, headers: dict[str, str], body: bytes, *, now: datetime, tolerance: int = 300
) -> bool:
    """What a receiver checks: a signature that matches and a timestamp within tolerance."""
    try:
        timestamp = int(headers["webhook-timestamp"])
        expected = webhook_signature(secret, headers["webhook-id"], timestamp, body)
    except (KeyError, ValueError):
        return False
    if abs(now.timestamp() - timestamp) > tolerance:
        return False
    offered = headers.get("webhook-signature", "").split(" ")
    return any(hmac.compare_digest(expected, candidate) for candidate in offered)


def backoff_seconds(attempts: int, *, base: float = 1.0, cap: float = 300.0) -> float:
    """Exponential: 1, 2, 4 … seconds after the 1st, 2nd, 3rd … failure, at most ``cap``."""
    return float(min(cap, base * 2 ** max(0, attempts - 1)))


SEAL_PURPOSE = "webhook-secret-seal"


def seal_webhook_secret(server: ServerSecret, subscription_id: str, secret: str) -> bytes:
    """AES-256-GCM under a key derived from the server secret, bound to the subscription."""
    nonce = os.urandom(12)
    aead = AESGCM(server.derive(SEAL_PURPOSE))
    return nonce + aead.encrypt(nonce, secret.encode(), subscription_id.encode())


def unseal_webhook_secret(server: ServerSecret, subscription_id: str, sealed: bytes) -> str:
    """The secret back; ``ValueError`` when the server secret is not the one that sealed it."""
    aead = AESGCM(server.derive(SEAL_PURPOSE))
    try:
        return aead.decrypt(sealed[:12], sealed[12:], subscription_id.encode()).decode()
    except InvalidTag as exc:
        raise ValueError(
            "cannot open the webhook secret: EXECAUTH_SECRET_KEY is not the one that sealed it"
        ) from exc
