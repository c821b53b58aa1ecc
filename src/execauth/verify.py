"""Offline receipt verification: a receipt and a key list in, a verdict out.

This module is what a relying party runs; it imports nothing from the server,
reads no clock (the caller passes ``now``) and touches no network. A receipt is
*authentic* when (docs/receipts.md, "How a verifier decides"):

1. it is a JSON object with a ``key_id`` naming a key in the list,
2. that key's ``id`` is ``service_key_`` + the first 16 hex digits of SHA-256 of
   its raw public key (so a tampered list cannot relabel a key),
3. the key is not revoked and ``created_at <= timestamp < expires_at``,
4. ``signature`` (and ``authoritySignature``, which must equal it) is a valid
   Ed25519 signature over RFC 8785 JSON of the receipt minus the unsigned fields,
5. ``receiptHash`` is SHA-256 of that same payload.

A PERMIT is *usable* only while ``now < expires_at``; expiry is reported apart
from authenticity. An ESCALATE is authentic or not like any other decision, and never
usable: it names an ``approval_id`` whose outcome is a receipt of its own. An outcome
receipt (``approval_id`` with ``approval_outcome``) lists its approvers; since they are
signed, the verdict reports them (docs/approvals.md). It reports a PERMIT's bound grant too,
``constraints`` and ``single_use`` (docs/receipts.md): signed like every field, so a
receipt whose constraints were altered fails as ``bad_signature``; present but malformed
(not a non-empty object, not ``true``) it is ``malformed_receipt``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_der_public_key

from execauth.receipt_format import SIGNATURE_PREFIX, UNSIGNED_FIELDS
from execauth.wire_time import parse_timestamp

KEY_ID_PREFIX = "service_key_"
DECISIONS = frozenset({"PERMIT", "DENY", "SILENCE", "ESCALATE"})


@dataclass(frozen=True, slots=True)
class PublishedKey:
    key_id: str
    public_key: Ed25519PublicKey
    created_at: datetime
    expires_at: datetime | None
    status: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """``reason`` is ``"valid"`` or the first problem found (a stable code); ``detail`` explains."""

    authentic: bool
    reason: str
    detail: str
    key_id: str | None = None
    decision: str | None = None
    expired: bool = False
    approval_id: str | None = None  # an ESCALATE, or the outcome of one
    approvers: tuple[str, ...] = ()  # key ids that approved (an approval's PERMIT)
    constraints: Mapping[str, Any] | None = None  # the bound grant the executor must respect
    single_use: bool = False  # the PERMIT must be consumed before acting

    @property
    def usable(self) -> bool:
        """Authentic and, for a PERMIT, not yet expired."""
        return self.authentic and not self.expired


class KeyListError(ValueError):
    """The key list itself is malformed."""


def key_id_for(raw_public_key: bytes) -> str:
    return KEY_ID_PREFIX + hashlib.sha256(raw_public_key).hexdigest()[:16]


def parse_key_list(document: Mapping[str, Any]) -> tuple[dict[str, PublishedKey], str | None]:
    """Parse ``/.well-known/service-keys.json``; return keys by id and the list's issuer."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise KeyListError("key list has no 'keys' array")
    keys: dict[str, PublishedKey] = {}
    for entry in entries:
        key = _parse_key_entry(entry)
        if key is not None:
            keys[key.key_id] = key
    issuer = document.get("issuer")
    return keys, issuer if isinstance(issuer, str) else None


def _parse_key_entry(entry: object) -> PublishedKey | None:
    """One entry, or ``None`` when it is no well-formed Ed25519 key (it then verifies nothing)."""
    if not isinstance(entry, dict):
        return None
    if str(entry.get("algorithm", "")).lower() != "ed25519":
        return None
    key_id = entry.get("key_id", entry.get("id"))
    try:
        der = base64.b64decode(entry["public_key"], validate=True)
        public_key = load_der_public_key(der)
        created_at = parse_timestamp(entry["created_at"])
        expires_raw = entry.get("expires_at")
        expires_at = parse_timestamp(expires_raw) if expires_raw is not None else None
    except (KeyError, ValueError, TypeError, binascii.Error, UnsupportedAlgorithm):
        return None
    if not isinstance(public_key, Ed25519PublicKey) or not isinstance(key_id, str):
        return None
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    if key_id != key_id_for(raw) or entry.get("id", key_id) != key_id:
        return None  # a key whose id does not match its bytes vouches for nothing
    status = entry.get("status", "active")
    return PublishedKey(key_id, public_key, created_at, expires_at, str(status))


def reference_signing_payload(receipt: Mapping[str, Any]) -> bytes:
    """The signed bytes, from the reference RFC 8785 implementation.

    The server signs through ``execauth.canonical``'s fast path; verifying with
    ``rfc8785`` itself keeps this module auditable on its own and makes every
    sign-then-verify test a cross-check of that fast path.
    """
    return rfc8785.dumps({k: v for k, v in receipt.items() if k not in UNSIGNED_FIELDS})


def verify_receipt(
    receipt: object,
    keys: Mapping[str, PublishedKey],
    *,
    now: datetime,
    issuer: str | None = None,
) -> Verdict:
    """Check ``receipt`` against ``keys`` as of ``now``; never raises on bad input."""
    if not isinstance(receipt, dict):
        return Verdict(False, "malformed_receipt", "receipt is not a JSON object")
    key_id = receipt.get("key_id")
    decision = receipt.get("decision")
    decision = decision if isinstance(decision, str) else None

    def fail(reason: str, detail: str) -> Verdict:
        return Verdict(False, reason, detail, key_id if isinstance(key_id, str) else None, decision)

    if not isinstance(key_id, str):
        return fail("malformed_receipt", "receipt has no key_id")
    signature = receipt.get("signature")
    if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
        return fail("malformed_receipt", "receipt has no 'ed25519:' signature")
    if receipt.get("authoritySignature", signature) != signature:
        return fail("signature_fields_disagree", "authoritySignature differs from signature")
    try:
        timestamp = parse_timestamp(receipt["timestamp"])
    except (KeyError, ValueError, TypeError):
        return fail("malformed_receipt", "receipt has no valid RFC 3339 timestamp")
    if decision not in DECISIONS:
        return fail("malformed_receipt", f"unknown decision {decision!r}")

    key = keys.get(key_id)
    if key is None:
        return fail("unknown_key", f"key {key_id} is not in the key list")
    if key.status == "revoked":
        return fail("revoked_key", f"key {key_id} has been revoked")
    if timestamp < key.created_at or (key.expires_at is not None and timestamp >= key.expires_at):
        return fail(
            "key_not_valid_at_timestamp",
            f"receipt timestamp {receipt['timestamp']} is outside the validity of key {key_id}",
        )
    if issuer is not None and receipt.get("issuer") != issuer:
        return fail(
            "issuer_mismatch", f"receipt issuer {receipt.get('issuer')!r} is not {issuer!r}"
        )

    try:
        payload = reference_signing_payload(receipt)
        raw_signature = base64.b64decode(signature[len(SIGNATURE_PREFIX) :], validate=True)
        key.public_key.verify(raw_signature, payload)
    except (InvalidSignature, ValueError, TypeError, binascii.Error):
        return fail("bad_signature", "signature does not match the receipt's contents")
    receipt_hash = receipt.get("receiptHash")
    if receipt_hash is not None and receipt_hash != "sha256:" + hashlib.sha256(payload).hexdigest():
        return fail("receipt_hash_mismatch", "receiptHash is not the SHA-256 of the signed payload")

    expired = False
    if decision == "PERMIT":
        try:
            expired = now >= parse_timestamp(receipt["expires_at"])
        except (KeyError, ValueError, TypeError):
            return fail("malformed_receipt", "PERMIT receipt has no valid expires_at")
    approval_id = receipt.get("approval_id")
    if decision == "ESCALATE" and not isinstance(approval_id, str):
        return fail("malformed_receipt", "ESCALATE receipt has no approval_id")
    approvers = _approvers(receipt.get("approvers"))
    if approvers is None:
        return fail("malformed_receipt", "approvers is not a list of {key_id, …} objects")
    constraints = receipt.get("constraints")
    if "constraints" in receipt and (not isinstance(constraints, dict) or not constraints):
        return fail("malformed_receipt", "constraints is not a non-empty JSON object")
    if receipt.get("single_use", True) is not True:
        return fail("malformed_receipt", "single_use is present but not true")
    detail = "signature valid" + ("; PERMIT has expired" if expired else "")
    if approvers:
        detail += "; approved by " + ", ".join(approvers)
    if isinstance(constraints, dict):
        detail += "; constraints " + json.dumps(constraints, sort_keys=True, ensure_ascii=False)
    if "single_use" in receipt:
        detail += "; single use (consume before acting)"
    return Verdict(
        True,
        "valid",
        detail,
        key_id,
        decision,
        expired,
        approval_id if isinstance(approval_id, str) else None,
        approvers,
        constraints if isinstance(constraints, dict) else None,
        "single_use" in receipt,
    )


def _approvers(value: object) -> tuple[str, ...] | None:
    """The approving key ids of an outcome receipt; ``None`` when the field is malformed."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return None
    ids = [entry.get("key_id") for entry in value if isinstance(entry, dict)]
    if len(ids) != len(value) or not all(isinstance(i, str) for i in ids):
        return None
    return tuple(str(i) for i in ids)


def command_outside_grant(receipt: Mapping[str, Any], argv: Sequence[str]) -> str | None:
    """Why ``argv`` is outside the PERMIT's ``allowed_commands``; ``None`` when it is inside,
    or when the PERMIT binds no commands (docs/receipts.md, "Constraints").

    The SDKs' rule, exactly: an entry that is a string matches ``argv[0]`` as given (no
    path resolution: ``git`` does not allow ``/usr/bin/git``, no globbing), an entry that
    is a list matches the whole argv. A malformed grant allows nothing (fail closed).
    """
    constraints = receipt.get("constraints")
    if constraints is None:
        return None
    if not isinstance(constraints, Mapping):
        return "the PERMIT's constraints are not a JSON object"
    if "allowed_commands" not in constraints:
        return None
    entries = constraints["allowed_commands"]
    if not isinstance(entries, list):
        return "the PERMIT's allowed_commands is not a list"
    if not argv:
        return "no command to check against the PERMIT's allowed_commands"
    for entry in entries:
        if entry == argv[0] if isinstance(entry, str) else entry == list(argv):
            return None
    return (
        f"constraint_exceeded:allowed_commands: the PERMIT allows only "
        f"{json.dumps(entries, ensure_ascii=False)}, not {json.dumps(list(argv))}"
    )


def unmet_expectations(
    receipt: Mapping[str, Any],
    *,
    surface: str | None = None,
    actor: str | None = None,
    request_digest: str | None = None,
    decision: str | None = None,
    request_id: str | None = None,
) -> list[str]:
    """What differs between an (authentic) receipt and the request it is meant to authorize."""
    problems = []
    for field, expected in (
        ("decision", decision),
        ("surface", surface),
        ("actor", actor),
        ("request_digest", request_digest),
        ("request_id", request_id),
    ):
        if expected is not None and receipt.get(field) != expected:
            problems.append(f"{field} is {receipt.get(field)!r}, expected {expected!r}")
    return problems
