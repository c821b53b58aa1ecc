"""Offline receipt verification: a receipt and a key list in, a ``Verdict`` out.

Self-contained on purpose (only ``cryptography`` and ``rfc8785``): it shares no code
with the server, so it is an independent check. The rules (docs/receipts.md,
"How a verifier decides"), in order; the first failure is the verdict's ``reason``:

1. the receipt is an object with a string ``key_id``          → ``malformed_receipt``
2. ``signature`` is a string starting ``ed25519:``            → ``malformed_receipt``
3. ``authoritySignature``, if present, equals ``signature``   → ``signature_fields_disagree``
4. ``timestamp`` is RFC 3339 with a time zone                 → ``malformed_receipt``
5. ``decision`` is PERMIT, DENY, SILENCE or ESCALATE         → ``malformed_receipt``
6. ``key_id`` names a key in the list                         → ``unknown_key``
7. that key is not revoked                                    → ``revoked_key``
8. ``created_at <= timestamp < expires_at`` of the key        → ``key_not_valid_at_timestamp``
9. the receipt's ``issuer`` is the key list's (when it has one) → ``issuer_mismatch``
10. Ed25519 over RFC 8785 JSON of the receipt minus
    ``signature``/``authoritySignature``/``receiptHash`` checks → ``bad_signature``
11. ``receiptHash``, if present, is SHA-256 of that payload    → ``receipt_hash_mismatch``
12. a PERMIT has a parseable ``expires_at``                   → ``malformed_receipt``
13. an ESCALATE has an ``approval_id``; ``approvers``, if
    present, is a list of objects with a ``key_id``             → ``malformed_receipt``
14. ``constraints``, if present, is a non-empty object;
    ``single_use``, if present, is ``true``                     → ``malformed_receipt``

An authentic PERMIT with ``expires_at <= now`` is ``expired``: authentic, not usable.
A key-list entry whose id is not ``service_key_`` + SHA-256(raw key)[:16], or that is
not Ed25519, is ignored, so a tampered list cannot relabel a key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key

from execauth_client.receipt import Receipt

SIGNATURE_PREFIX = "ed25519:"
KEY_ID_PREFIX = "service_key_"
UNSIGNED_FIELDS = frozenset({"signature", "authoritySignature", "receiptHash"})
DECISIONS = frozenset({"PERMIT", "DENY", "SILENCE", "ESCALATE"})

VALID = "valid"
MALFORMED_RECEIPT = "malformed_receipt"
SIGNATURE_FIELDS_DISAGREE = "signature_fields_disagree"
UNKNOWN_KEY = "unknown_key"
REVOKED_KEY = "revoked_key"
KEY_NOT_VALID_AT_TIMESTAMP = "key_not_valid_at_timestamp"
ISSUER_MISMATCH = "issuer_mismatch"
BAD_SIGNATURE = "bad_signature"
RECEIPT_HASH_MISMATCH = "receipt_hash_mismatch"


class KeyListError(ValueError):
    """The key list document itself is malformed (no ``keys`` array)."""


@dataclass(frozen=True, slots=True)
class PublicKey:
    key_id: str
    public_key: Ed25519PublicKey
    created_at: datetime
    expires_at: datetime | None
    status: str


@dataclass(frozen=True, slots=True)
class KeyList:
    """A parsed ``/.well-known/service-keys.json``."""

    keys: Mapping[str, PublicKey]
    issuer: str | None = None
    cache_ttl: int | None = None
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_document(cls, document: object) -> KeyList:
        if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
            raise KeyListError("key list has no 'keys' array")
        keys: dict[str, PublicKey] = {}
        for entry in document["keys"]:
            key = _parse_key_entry(entry)
            if key is not None:
                keys[key.key_id] = key
        issuer = document.get("issuer")
        ttl = document.get("cache_ttl")
        return cls(
            keys,
            issuer if isinstance(issuer, str) else None,
            ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else None,
            dict(document),
        )

    def __contains__(self, key_id: object) -> bool:
        return key_id in self.keys


@dataclass(frozen=True, slots=True)
class Verdict:
    """``reason`` is ``"valid"`` or the first problem found; ``detail`` explains it."""

    authentic: bool
    reason: str
    detail: str
    key_id: str | None = None
    decision: str | None = None
    expired: bool = False
    approvers: tuple[str, ...] = ()  # key ids that approved (the PERMIT of an ESCALATE)

    @property
    def usable(self) -> bool:
        """Authentic and, for a PERMIT, not yet expired."""
        return self.authentic and not self.expired


def key_id_for(raw_public_key: bytes) -> str:
    return KEY_ID_PREFIX + hashlib.sha256(raw_public_key).hexdigest()[:16]


def parse_timestamp(text: object) -> datetime:
    """RFC 3339 with a time zone (``Z`` or an offset); anything else raises ``ValueError``."""
    if not isinstance(text, str) or "T" not in text:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp has no time zone: {text!r}")
    return parsed.astimezone(UTC)


def signing_payload(receipt: Mapping[str, Any]) -> bytes:
    """The bytes the signature covers: RFC 8785 JSON of every field but the unsigned ones."""
    return bytes(rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED_FIELDS}))


def _parse_key_entry(entry: object) -> PublicKey | None:
    if not isinstance(entry, Mapping) or str(entry.get("algorithm", "")).lower() != "ed25519":
        return None
    key_id = entry.get("key_id", entry.get("id"))
    try:
        public_key = load_der_public_key(base64.b64decode(entry["public_key"], validate=True))
        created_at = parse_timestamp(entry["created_at"])
        ends = entry.get("expires_at")
        expires_at = parse_timestamp(ends) if ends is not None else None
    except (KeyError, ValueError, TypeError, binascii.Error, UnsupportedAlgorithm):
        return None
    if not isinstance(public_key, Ed25519PublicKey) or not isinstance(key_id, str):
        return None
    if key_id != key_id_for(public_key.public_bytes_raw()) or entry.get("id", key_id) != key_id:
        return None  # an id that does not match its key's bytes vouches for nothing
    return PublicKey(key_id, public_key, created_at, expires_at, str(entry.get("status", "active")))


def verify(
    receipt: Receipt | Mapping[str, Any] | object,
    keys: KeyList | Mapping[str, Any],
    *,
    now: datetime | None = None,
) -> Verdict:
    """Check ``receipt`` against ``keys`` (a ``KeyList`` or the raw document); never raises
    on bad receipts. ``now`` defaults to the current time."""
    key_list = keys if isinstance(keys, KeyList) else KeyList.from_document(keys)
    now = now or datetime.now(UTC)
    raw = receipt.raw if isinstance(receipt, Receipt) else receipt
    if not isinstance(raw, Mapping):
        return Verdict(False, MALFORMED_RECEIPT, "receipt is not a JSON object")
    key_id = raw.get("key_id")
    decision = raw.get("decision") if isinstance(raw.get("decision"), str) else None

    def fail(reason: str, detail: str) -> Verdict:
        return Verdict(False, reason, detail, key_id if isinstance(key_id, str) else None, decision)

    if not isinstance(key_id, str):
        return fail(MALFORMED_RECEIPT, "receipt has no key_id")
    signature = raw.get("signature")
    if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
        return fail(MALFORMED_RECEIPT, "receipt has no 'ed25519:' signature")
    if raw.get("authoritySignature", signature) != signature:
        return fail(SIGNATURE_FIELDS_DISAGREE, "authoritySignature differs from signature")
    try:
        timestamp = parse_timestamp(raw.get("timestamp"))
    except ValueError:
        return fail(MALFORMED_RECEIPT, "receipt has no valid RFC 3339 timestamp")
    if decision not in DECISIONS:
        return fail(MALFORMED_RECEIPT, f"unknown decision {decision!r}")

    key = key_list.keys.get(key_id)
    if key is None:
        return fail(UNKNOWN_KEY, f"key {key_id} is not in the key list")
    if key.status == "revoked":
        return fail(REVOKED_KEY, f"key {key_id} has been revoked")
    if timestamp < key.created_at or (key.expires_at is not None and timestamp >= key.expires_at):
        return fail(KEY_NOT_VALID_AT_TIMESTAMP, f"timestamp is outside the validity of {key_id}")
    if key_list.issuer is not None and raw.get("issuer") != key_list.issuer:
        return fail(ISSUER_MISMATCH, f"issuer {raw.get('issuer')!r} is not {key_list.issuer!r}")

    try:
        payload = signing_payload(raw)
        key.public_key.verify(
            base64.b64decode(signature[len(SIGNATURE_PREFIX) :], validate=True), payload
        )
    except (InvalidSignature, ValueError, TypeError, binascii.Error):
        return fail(BAD_SIGNATURE, "signature does not match the receipt's contents")
    receipt_hash = raw.get("receiptHash")
    if receipt_hash is not None and receipt_hash != "sha256:" + hashlib.sha256(payload).hexdigest():
        return fail(RECEIPT_HASH_MISMATCH, "receiptHash is not the SHA-256 of the signed payload")

    expired = False
    if decision == "PERMIT":
        try:
            expired = now >= parse_timestamp(raw.get("expires_at"))
        except ValueError:
            return fail(MALFORMED_RECEIPT, "PERMIT receipt has no valid expires_at")
    if decision == "ESCALATE" and not isinstance(raw.get("approval_id"), str):
        return fail(MALFORMED_RECEIPT, "ESCALATE receipt has no approval_id")
    approvers = _approvers(raw.get("approvers"))
    if approvers is None:
        return fail(MALFORMED_RECEIPT, "approvers is not a list of {key_id, ...} objects")
    constraints = raw.get("constraints")
    if "constraints" in raw and (not isinstance(constraints, Mapping) or not constraints):
        return fail(MALFORMED_RECEIPT, "constraints is not a non-empty JSON object")
    if raw.get("single_use", True) is not True:
        return fail(MALFORMED_RECEIPT, "single_use is present but not true")
    detail = "signature valid" + ("; PERMIT has expired" if expired else "")
    if approvers:
        detail += "; approved by " + ", ".join(approvers)
    return Verdict(True, VALID, detail, key_id, decision, expired, approvers)


def _approvers(value: object) -> tuple[str, ...] | None:
    """The approving key ids an outcome receipt signs; ``None`` when malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    ids = [entry.get("key_id") for entry in value if isinstance(entry, dict)]
    if len(ids) != len(value) or not all(isinstance(i, str) for i in ids):
        return None
    return tuple(str(i) for i in ids)


def unmet_expectations(
    receipt: Receipt | Mapping[str, Any],
    *,
    surface: str | None = None,
    actor: str | None = None,
    request_digest: str | None = None,
) -> list[str]:
    """How an (authentic) receipt differs from the request it is meant to authorize."""
    raw = receipt.raw if isinstance(receipt, Receipt) else receipt
    problems = []
    for name, expected in (
        ("surface", surface),
        ("actor", actor),
        ("request_digest", request_digest),
    ):
        if expected is not None and raw.get(name) != expected:
            problems.append(f"{name} is {raw.get(name)!r}, expected {expected!r}")
    return problems
