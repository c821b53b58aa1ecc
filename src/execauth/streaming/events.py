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

EVENT_TYPE = "execauth.decision"  # every entry that is not a step of an approval
APPROVAL_STATES = ("pending", "approved", "rejected", "expired")
APPROVAL_PREFIX = "execauth.approval."
APPROVAL_TYPES = tuple(APPROVAL_PREFIX + state for state in APPROVAL_STATES)
EVENT_TYPES = (EVENT_TYPE, *APPROVAL_TYPES)
APPROVAL_WILDCARD = APPROVAL_PREFIX + "*"
SECRET_PREFIX = "whsec_"  # noqa: S105 (a format prefix, not a secret)


def approval_state(receipt: dict[str, Any]) -> str | None:
    """Which step of an approval a receipt is, if any: its ESCALATE opens one (pending),
    its outcome receipt names how it ended (``approval_outcome``)."""
    if receipt.get("decision") == "ESCALATE":
        return "pending"
    ended = receipt.get("approval_outcome")
    return ended if ended in APPROVAL_STATES else None


def event_type(receipt: dict[str, Any]) -> str:
    """The event's ``type``, derived from the signed receipt alone (docs/observability.md)."""
    state = approval_state(receipt)
    return EVENT_TYPE if state is None else APPROVAL_PREFIX + state


def parse_event_types(values: list[str]) -> tuple[str, ...]:
    """A subscription's filter: known types and ``execauth.approval.*``; ``ValueError`` else.

    Sorted and de-duplicated, so equal filters are stored alike.
    """
    if not values:
        raise ValueError("events must name at least one event type (omit it for every event)")
    unknown = [v for v in values if v not in EVENT_TYPES and v != APPROVAL_WILDCARD]
    if unknown:
        allowed = ", ".join((*EVENT_TYPES, APPROVAL_WILDCARD))
        raise ValueError(f"unknown event type(s) {', '.join(unknown)}; known: {allowed}")
    return tuple(sorted(set(values)))


def wanted(event_types: tuple[str, ...] | None, kind: str) -> bool:
    """Whether a subscription filtering on ``event_types`` (``None``: no filter) gets ``kind``."""
    if event_types is None:
        return True
    if kind.startswith(APPROVAL_PREFIX) and APPROVAL_WILDCARD in event_types:
        return True
    return kind in event_types


def approval_view(
    state: str,
    escalation: dict[str, Any],
    terms: dict[str, Any],
    votes: list[dict[str, Any]],
    decided_at: str | None,
) -> dict[str, Any]:
    """The envelope's ``approval``: enough to route a step to chat or paging unparsed.

    Built only from what is stored and final for that log entry (the ESCALATE receipt,
    the terms it was decided under, the votes of a final approval), so a redelivery
    carries the same object. ``votes`` is empty for ``pending``: the event is the request.
    """
    approval_id = str(escalation["approval_id"])
    issuer = str(escalation.get("issuer", "")).rstrip("/")
    return {
        "approval_id": approval_id,
        "state": state,
        "surface": escalation.get("surface"),
        "actor": escalation.get("actor"),
        "action": escalation.get("action"),
        "policy_id": escalation.get("policy_id"),
        "rule_id": escalation.get("rule_id"),
        "requested_by": terms.get("requester_key_id"),
        "approvers": {"roles": list(terms.get("roles", [])), "keys": list(terms.get("keys", []))},
        "quorum": escalation.get("approval_quorum"),
        "approvals": sum(1 for v in votes if v.get("vote") == "approve"),
        "votes": votes,
        "requested_at": escalation.get("timestamp"),
        "expires_at": escalation.get("approval_expires_at"),
        "decided_at": decided_at,
        "escalation_receipt_id": escalation.get("receipt_id"),
        "follow_url": escalation.get("approval_url", f"{issuer}/v1/approvals/{approval_id}"),
        "console_url": f"{issuer}/console/approvals/{approval_id}",
    }


@dataclass(frozen=True, slots=True)
class DecisionEvent:
    org_id: str
    log_index: int
    execution_id: str
    sequenced_at: datetime
    receipt: bytes  # the stored receipt bytes, exactly as answered
    kind: str = EVENT_TYPE  # the envelope's ``type`` (``event_type`` of the receipt)
    approval: dict[str, Any] | None = None  # ``approval_view`` for an approval's step

    @property
    def event_id(self) -> str:
        """Stable across retries and instances: the org and the position in its log."""
        return f"{self.org_id}:{self.log_index}"

    def envelope(self) -> dict[str, Any]:
        envelope: dict[str, Any] = {
            "id": self.event_id,
            "type": self.kind,
            "org_id": self.org_id,
            "log_index": self.log_index,
            "execution_id": self.execution_id,
            "sequenced_at": format_timestamp(self.sequenced_at),
            "receipt": json.loads(self.receipt),
        }
        if self.approval is not None:
            envelope["approval"] = self.approval
        return envelope

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
