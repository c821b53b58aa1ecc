"""Generate the receipt-verification test vectors in ``testdata/vectors/``.

    .venv/bin/python scripts/generate_vectors.py          # (re)write the files
    .venv/bin/python scripts/generate_vectors.py --check  # exit 1 if they differ

Every signing key below is derived from a fixed, published 32-byte seed: they are
**TEST ONLY** keys, never to be trusted for anything. Receipts are built and signed
with the server's own functions (``execauth.receipts.build_receipt`` /
``sign_receipt``) so their bytes are what a running server would produce; Ed25519 is
deterministic and every timestamp and identifier is fixed, so running this twice
writes byte-identical files. ``tests/test_vectors.py`` fails when the committed files
differ from a fresh run: change this script, never the files.

The expected verdict of each vector is written here by hand (not computed by the
server's verifier), so the server's verifier, the SDKs and ``execauth verify`` are
all tested against the same independent expectation.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ulid import ULID

from execauth.keyring import ActiveSigner, SigningKeyRecord, key_list_document
from execauth.policy.decision import Decision, Escalation, Outcome, PolicyRef, Reason
from execauth.receipts import (
    EXECUTION_ID_PREFIX,
    RECEIPT_ID_PREFIX,
    SIGNATURE_PREFIX,
    build_outcome_receipt,
    build_receipt,
    sign_receipt,
    signing_payload,
)
from execauth.request import parse_execute_request
from execauth.verify import key_id_for
from execauth.wire_time import parse_timestamp

ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = ROOT / "testdata" / "vectors"
FORMAT_VERSION = 1

ISSUER = "https://execauth.test"
ORG_ID = "org_01j00000000000000000000000"
POLICY = PolicyRef("deploys", 1, "sha256:" + hashlib.sha256(b"test vector policy").hexdigest())
# The clock every vector is judged at. Expected verdicts also hold for any real clock
# between 2025-06-01T12:10Z and 2099-01-01T00:00Z, which is what lets `execauth verify`
# (it reads the real clock) be tested against the same files.
NOW = "2026-01-01T00:00:00.000Z"
FAR_FUTURE = "2099-01-01T00:00:00.000Z"  # expires_at of every "unexpired" PERMIT


def ts(text: str) -> datetime:
    return parse_timestamp(text)


# --- TEST ONLY keys ---------------------------------------------------------------


@dataclass(frozen=True)
class TestKey:
    """A TEST ONLY Ed25519 key from a fixed seed, and where it sits in the key list."""

    name: str
    seed_hex: str
    role: str
    created_at: str
    retired_at: str | None = None
    revoked_at: str | None = None

    @property
    def private_key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(bytes.fromhex(self.seed_hex))

    @property
    def raw_public(self) -> bytes:
        return self.private_key.public_key().public_bytes_raw()

    @property
    def key_id(self) -> str:
        return key_id_for(self.raw_public)

    def signer(self, claimed_key_id: str | None = None) -> ActiveSigner:
        return ActiveSigner(claimed_key_id or self.key_id, self.private_key)

    def record(self) -> SigningKeyRecord:
        return SigningKeyRecord(
            key_id=self.key_id,
            public_key=self.raw_public,
            sealed_private_key=b"",
            created_at=ts(self.created_at),
            retired_at=ts(self.retired_at) if self.retired_at else None,
            revoked_at=ts(self.revoked_at) if self.revoked_at else None,
        )


def _seed(label: str) -> str:
    return hashlib.sha256(f"execauth test vector key {label} - TEST ONLY".encode()).hexdigest()


PRIMARY = TestKey(
    "primary", _seed("primary"), "active key; signs most vectors", "2024-01-01T00:00:00.000Z"
)
SECONDARY = TestKey(
    "secondary",
    _seed("secondary"),
    "a second active key (rotation overlap)",
    "2024-06-01T00:00:00.000Z",
)
RETIRED = TestKey(
    "retired",
    _seed("retired"),
    "retired key: signed from 2022-01-01 until 2024-01-01",
    "2022-01-01T00:00:00.000Z",
    retired_at="2024-01-01T00:00:00.000Z",
)
REVOKED = TestKey(
    "revoked",
    _seed("revoked"),
    "revoked key: every receipt it signed fails",
    "2023-01-01T00:00:00.000Z",
    revoked_at="2023-07-01T00:00:00.000Z",
)
UNLISTED = TestKey(
    "unlisted",
    _seed("unlisted"),
    "a well-formed key that is in no key list",
    "2024-01-01T00:00:00.000Z",
)
ATTACKER = TestKey(
    "attacker",
    _seed("attacker"),
    "signs receipts claiming another key's id",
    "2024-01-01T00:00:00.000Z",
)
ALL_KEYS = (PRIMARY, SECONDARY, RETIRED, REVOKED, UNLISTED, ATTACKER)


def _standard_keylist() -> dict[str, Any]:
    records = [RETIRED.record(), REVOKED.record(), PRIMARY.record(), SECONDARY.record()]
    return key_list_document(records, ISSUER)


def _entry(key: TestKey) -> dict[str, Any]:
    entries: list[dict[str, Any]] = key_list_document([key.record()], ISSUER)["keys"]
    return entries[0]


def _keylists() -> dict[str, dict[str, Any]]:
    standard = _standard_keylist()
    variant = {
        "keys": [
            {
                "id": PRIMARY.key_id,  # variant A: `id` only, no `key_id`, no `status`
                "algorithm": "ed25519",  # variant B spelling
                "public_key": _entry(PRIMARY)["public_key"],
                "created_at": PRIMARY.created_at,
            }
        ],
        "issuer": ISSUER,
        "cache_ttl": 3600,
    }
    relabelled = dict(_entry(ATTACKER), id=PRIMARY.key_id, key_id=PRIMARY.key_id)
    disagreeing = dict(_entry(PRIMARY), id=SECONDARY.key_id)
    rsa = dict(_entry(PRIMARY), algorithm="RS256")
    return {
        "standard": standard,
        "no-issuer": {"keys": standard["keys"], "cache_ttl": 3600},
        "variant-spellings": variant,
        "relabelled-key": {"keys": [relabelled], "issuer": ISSUER, "cache_ttl": 3600},
        "id-disagrees-with-key-id": {"keys": [disagreeing], "issuer": ISSUER, "cache_ttl": 3600},
        "non-ed25519-algorithm": {"keys": [rsa], "issuer": ISSUER, "cache_ttl": 3600},
    }


# --- receipts ---------------------------------------------------------------------


def _ids(name: str, timestamp: datetime) -> tuple[str, str]:
    digest = hashlib.sha256(name.encode()).digest()
    millis = int(timestamp.timestamp() * 1000).to_bytes(6, "big")
    return (
        RECEIPT_ID_PREFIX + digest[:8].hex(),
        EXECUTION_ID_PREFIX + str(ULID.from_bytes(millis + digest[8:18])),
    )


def _ttl_until(timestamp: str, expires_at: str) -> int:
    return int((ts(expires_at) - ts(timestamp)).total_seconds())


PERMIT_REQUEST: dict[str, Any] = {
    "surface": "deploy.production",
    "action": "deploy",
    "actor": "release-bot",
    "context": {"branch": "main", "commit": "4f2a9c1"},
    "request_id": "req-0001",
}


def make_receipt(
    name: str,
    *,
    key: TestKey = PRIMARY,
    claimed_key_id: str | None = None,
    outcome: Outcome = Outcome.PERMIT,
    timestamp: str = "2025-06-01T12:00:00.000Z",
    expires_at: str = FAR_FUTURE,
    request: Mapping[str, Any] = PERMIT_REQUEST,
    rule_id: str | None = "main-only",
    reason: str | None = None,
    message: str | None = None,
    extra: Mapping[str, Any] | None = None,
    edit_unsigned: Callable[[dict[str, Any]], None] | None = None,
    constraints: Mapping[str, Any] | None = None,
    single_use: bool = False,
) -> dict[str, Any]:
    """A receipt as the server builds it, then ``extra`` signed fields, then signed.

    ``edit_unsigned`` changes the receipt *before* signing (a receipt that is
    authentically signed but malformed); tampering after signing is done by the caller.
    """
    moment = ts(timestamp)
    if outcome is Outcome.PERMIT:
        decision = Decision(
            outcome,
            rule_id,
            None,
            None,
            _ttl_until(timestamp, expires_at),
            constraints=constraints,
            single_use=single_use,
        )
    elif outcome is Outcome.DENY:
        decision = Decision(
            outcome,
            rule_id,
            reason or "SERVICE_POLICY_WRONG_BRANCH",
            "Only main can be deployed" if message is None else message,
        )
    else:
        decision = Decision(
            outcome,
            None,
            reason or Reason.MISSING_CONTEXT,
            "required field context.branch is missing" if message is None else message,
        )
    receipt_id, execution_id = _ids(name, moment)
    signer = key.signer(claimed_key_id)
    unsigned = build_receipt(
        receipt_id=receipt_id,
        execution_id=execution_id,
        request=parse_execute_request(dict(request), None),
        decision=decision,
        policy=POLICY,
        org_id=ORG_ID,
        issuer=ISSUER,
        now=moment,
        key_id=signer.key_id,
    )
    if extra:
        key_id = unsigned.pop("key_id")
        unsigned.update(extra)
        unsigned["key_id"] = key_id
    if edit_unsigned is not None:
        edit_unsigned(unsigned)
    return sign_receipt(unsigned, signer)[0]


def sign_raw_payload(receipt: dict[str, Any], payload: bytes, key: TestKey) -> dict[str, Any]:
    """Sign exact ``payload`` bytes (for payloads ``rfc8785`` refuses to produce)."""
    signature = SIGNATURE_PREFIX + base64.b64encode(key.private_key.sign(payload)).decode()
    return receipt | {
        "signature": signature,
        "authoritySignature": signature,
        "receiptHash": "sha256:" + hashlib.sha256(payload).hexdigest(),
    }


# --- vectors ----------------------------------------------------------------------


@dataclass
class Vector:
    name: str
    description: str
    receipt: Any
    authentic: bool
    reason: str
    decision: str | None
    expired: bool = False
    keys: str = "standard"
    ascii_only: bool = False  # write the file with \\u escapes for every non-ASCII char

    def expected(self) -> dict[str, Any]:
        key_id = self.receipt.get("key_id") if isinstance(self.receipt, dict) else None
        return {
            "authentic": self.authentic,
            "reason": self.reason,
            "expired": self.expired,
            "decision": self.decision,
            "key_id": key_id if isinstance(key_id, str) else None,
            "exit_code": 0 if self.authentic and not self.expired else 1,
        }


def tampered(receipt: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``receipt`` with fields changed after signing (the signature is kept)."""
    return receipt | changes


def without(receipt: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in receipt.items() if k not in names}


def _valid(name: str, description: str, receipt: dict[str, Any], **kw: Any) -> Vector:
    return Vector(name, description, receipt, True, "valid", receipt["decision"], **kw)


def _invalid(name: str, description: str, receipt: Any, reason: str, **kw: Any) -> Vector:
    decision = receipt.get("decision") if isinstance(receipt, dict) else None
    decision = decision if isinstance(decision, str) else None
    return Vector(name, description, receipt, False, reason, decision, **kw)


DENY_REQUEST = PERMIT_REQUEST | {"context": {"branch": "dev"}, "request_id": "req-0002"}
SILENCE_REQUEST = {"surface": "deploy.production", "actor": "release-bot"}


def valid_vectors() -> list[Vector]:
    permit = make_receipt("permit")
    deny = make_receipt("deny", outcome=Outcome.DENY, request=DENY_REQUEST, rule_id="wrong-branch")
    silence = make_receipt("silence", outcome=Outcome.SILENCE, request=SILENCE_REQUEST)
    return [
        _valid("permit-valid", "A PERMIT signed by the active key, unexpired.", permit),
        _valid("deny-valid", "A DENY signed by the active key.", deny),
        _valid("silence-valid", "A SILENCE (missing required context; rule_id null).", silence),
        Vector(
            "permit-expired",
            "An authentic PERMIT whose expires_at (2025-06-01T12:10Z) has passed: "
            "authentic, but expired, so not usable (CLI exit 1).",
            make_receipt("permit-expired", expires_at="2025-06-01T12:10:00.000Z"),
            True,
            "valid",
            "PERMIT",
            expired=True,
        ),
        _valid(
            "deny-expired-fields-irrelevant",
            "A DENY has no expires_at; expiry never applies to DENY or SILENCE.",
            make_receipt(
                "deny-old",
                outcome=Outcome.DENY,
                request=DENY_REQUEST,
                timestamp="2024-02-01T00:00:00.000Z",
                rule_id="wrong-branch",
            ),
        ),
        _valid(
            "permit-secondary-key",
            "Signed by the second active key (two keys active during a rotation).",
            make_receipt("permit-secondary", key=SECONDARY),
        ),
        _valid(
            "permit-retired-key-inside-window",
            "Signed by a now-retired key while it was still signing (2023-06-01): still valid.",
            make_receipt("permit-retired", key=RETIRED, timestamp="2023-06-01T00:00:00.000Z"),
        ),
        _valid(
            "permit-at-key-created-at",
            "timestamp equals the key's created_at exactly (created_at <= timestamp).",
            make_receipt("permit-at-created", timestamp=PRIMARY.created_at),
        ),
        _valid(
            "permit-just-before-key-expires",
            "timestamp 1 ms before the retired key's expires_at.",
            make_receipt("permit-before-end", key=RETIRED, timestamp="2023-12-31T23:59:59.999Z"),
        ),
        _valid(
            "permit-without-optional-unsigned-fields",
            "No receiptHash and no authoritySignature: both are optional for a verifier.",
            without(permit, "receiptHash", "authoritySignature"),
        ),
        _valid(
            "permit-minimal-request",
            "No action, actor or request_id: those fields are absent, not null.",
            make_receipt("permit-minimal", request={"surface": "deploy.staging"}, rule_id="anyone"),
        ),
        _valid(
            "permit-key-list-variant-spellings",
            "Key list entry with only `id` (no `key_id`), algorithm `ed25519`, no `status`.",
            permit,
            keys="variant-spellings",
        ),
        _valid(
            "permit-key-list-without-issuer",
            "The key list has no issuer, so the receipt's issuer is not compared.",
            make_receipt("permit-other-issuer", edit_unsigned=_set("issuer", "https://other.test")),
            keys="no-issuer",
        ),
        _valid(
            "permit-timestamp-without-milliseconds",
            "timestamp and expires_at are RFC 3339 without fractional seconds (signed so).",
            make_receipt(
                "permit-no-millis",
                edit_unsigned=_update(
                    timestamp="2025-06-01T12:00:00Z", expires_at="2099-01-01T00:00:00Z"
                ),
            ),
        ),
        _valid(
            "permit-timestamp-with-offset",
            "timestamp 2025-06-01T14:00:00.000+02:00 (= 12:00Z): an offset is a valid instant.",
            make_receipt(
                "permit-offset", edit_unsigned=_set("timestamp", "2025-06-01T14:00:00.000+02:00")
            ),
        ),
    ]


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return _update(**{name: value})


def _update(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def edit(receipt: dict[str, Any]) -> None:
        receipt.update(changes)

    return edit


def key_vectors() -> list[Vector]:
    return [
        _invalid(
            "unknown-key",
            "Signed correctly by a key that is not in the key list.",
            make_receipt("unknown-key", key=UNLISTED),
            "unknown_key",
        ),
        _invalid(
            "wrong-key",
            "Names the active key's id but is signed by another key.",
            make_receipt("wrong-key", key=ATTACKER, claimed_key_id=PRIMARY.key_id),
            "bad_signature",
        ),
        _invalid(
            "revoked-key",
            "Signed by a key inside its window, but the key is now revoked.",
            make_receipt("revoked", key=REVOKED, timestamp="2023-03-01T00:00:00.000Z"),
            "revoked_key",
        ),
        _invalid(
            "revoked-key-deny",
            "A DENY signed by the revoked key: revocation applies to every decision.",
            make_receipt(
                "revoked-deny",
                key=REVOKED,
                outcome=Outcome.DENY,
                request=DENY_REQUEST,
                timestamp="2023-03-01T00:00:00.000Z",
                rule_id="wrong-branch",
            ),
            "revoked_key",
        ),
        _invalid(
            "key-not-yet-valid",
            "timestamp 1 ms before the signing key's created_at.",
            make_receipt("before-created", timestamp="2023-12-31T23:59:59.999Z"),
            "key_not_valid_at_timestamp",
        ),
        _invalid(
            "key-not-yet-valid-offset",
            "timestamp 2024-01-01T01:00:00.000+02:00 is 2023-12-31T23:00Z, before the key's "
            "created_at: compare instants, not strings.",
            make_receipt(
                "before-created-offset",
                edit_unsigned=_set("timestamp", "2024-01-01T01:00:00.000+02:00"),
            ),
            "key_not_valid_at_timestamp",
        ),
        _invalid(
            "key-expired-at-timestamp",
            "timestamp equals the retired key's expires_at (timestamp < expires_at fails).",
            make_receipt("at-key-end", key=RETIRED, timestamp=RETIRED.retired_at or ""),
            "key_not_valid_at_timestamp",
        ),
        _invalid(
            "key-used-after-retirement",
            "Signed by the retired key in 2025, long after its window closed.",
            make_receipt("after-retired", key=RETIRED),
            "key_not_valid_at_timestamp",
        ),
        _invalid(
            "key-list-relabelled-key",
            "The key list publishes the attacker's key under the primary key's id; an id that "
            "does not match its key's bytes is dropped, so the key is unknown.",
            make_receipt("relabelled", key=ATTACKER, claimed_key_id=PRIMARY.key_id),
            "unknown_key",
            keys="relabelled-key",
        ),
        _invalid(
            "key-list-id-disagrees-with-key-id",
            "The key list entry's `id` and `key_id` differ; the entry is dropped.",
            make_receipt("id-disagree"),
            "unknown_key",
            keys="id-disagrees-with-key-id",
        ),
        _invalid(
            "key-list-non-ed25519-algorithm",
            "The key list entry says algorithm RS256; it verifies nothing.",
            make_receipt("rs256"),
            "unknown_key",
            keys="non-ed25519-algorithm",
        ),
        _invalid(
            "issuer-mismatch",
            "Authentically signed, but the receipt's issuer differs from the key list's issuer.",
            make_receipt("issuer", edit_unsigned=_set("issuer", "https://other.test")),
            "issuer_mismatch",
        ),
    ]


def tamper_vectors() -> list[Vector]:
    permit = make_receipt("tamper-permit")
    deny = make_receipt(
        "tamper-deny", outcome=Outcome.DENY, request=DENY_REQUEST, rule_id="wrong-branch"
    )
    silence = make_receipt("tamper-silence", outcome=Outcome.SILENCE, request=SILENCE_REQUEST)
    changes: list[tuple[str, dict[str, Any], str, Any]] = [
        ("permit", permit, "receipt_id", "service_rcpt_0000000000000000"),
        ("permit", permit, "execution_id", "service_exec_01JX0000000000000000000000"),
        ("permit", permit, "decision", "DENY"),
        ("permit", permit, "enforcement", "BLOCKED"),
        ("permit", permit, "surface", "deploy.staging"),
        ("permit", permit, "action", "rollback"),
        ("permit", permit, "actor", "release-bot2"),
        ("permit", permit, "org_id", "org_01j00000000000000000000001"),
        ("permit", permit, "timestamp", "2025-06-01T12:00:00.001Z"),
        ("permit", permit, "expires_at", "2099-01-01T00:00:00.001Z"),
        ("permit", permit, "policy_id", "deploys2"),
        ("permit", permit, "policy_version", 2),
        ("permit", permit, "policy_hash", "sha256:" + "0" * 64),
        ("permit", permit, "rule_id", "main-only2"),
        ("permit", permit, "request_id", "req-0009"),
        ("permit", permit, "request_digest", "sha256:" + "1" * 64),
        ("permit", permit, "key_id", SECONDARY.key_id),
        ("deny", deny, "decision", "PERMIT"),
        ("deny", deny, "reason_code", "INDETERMINATE_EVALUATION"),
        ("deny", deny, "reasonCode", "SERVICE_POLICY_DENIED"),
        ("deny", deny, "message", "Only main can be deployed."),
        ("silence", silence, "decision", "DENY"),
        ("silence", silence, "rule_id", "main-only"),
    ]
    vectors = [
        _invalid(
            f"tampered-{kind}-{name}",
            f"{kind.upper()} with the signed field {name!r} changed after signing.",
            tampered(receipt, **{name: value}),
            "bad_signature",
        )
        for kind, receipt, name, value in changes
    ]
    vectors += [
        _invalid(
            "tampered-permit-policy-version-type",
            'policy_version 1 changed to the string "1": JSON types are signed too.',
            tampered(permit, policy_version="1"),
            "bad_signature",
        ),
        _invalid(
            "tampered-silence-rule-id-null-removed",
            "The null rule_id removed: a null field is part of the signed payload.",
            without(silence, "rule_id"),
            "bad_signature",
        ),
        _invalid(
            "tampered-permit-field-added",
            "A field added after signing (every field except the three unsigned ones is signed).",
            tampered(permit, approved_by="mallory"),
            "bad_signature",
        ),
        _invalid(
            "tampered-permit-field-removed",
            "The actor field removed after signing.",
            without(permit, "actor"),
            "bad_signature",
        ),
        _invalid(
            "tampered-permit-key-id-unlisted",
            "key_id changed to a key that is not listed.",
            tampered(permit, key_id=UNLISTED.key_id),
            "unknown_key",
        ),
        _invalid(
            "tampered-permit-key-id-retired",
            "key_id changed to the retired key, whose window ended before the timestamp.",
            tampered(permit, key_id=RETIRED.key_id),
            "key_not_valid_at_timestamp",
        ),
        _invalid(
            "tampered-permit-issuer",
            "issuer changed after signing: fails the issuer check before the signature check.",
            tampered(permit, issuer="https://evil.test"),
            "issuer_mismatch",
        ),
        _invalid(
            "tampered-permit-decision-unknown",
            "decision changed to a value that is not PERMIT, DENY or SILENCE.",
            tampered(permit, decision="ALLOW"),
            "malformed_receipt",
        ),
        _invalid(
            "tampered-receipt-hash",
            "receiptHash changed; the signature itself is intact.",
            tampered(permit, receiptHash="sha256:" + "2" * 64),
            "receipt_hash_mismatch",
        ),
        _invalid(
            "authority-signature-differs",
            "authoritySignature is a valid signature of another receipt, not equal to signature.",
            tampered(permit, authoritySignature=deny["signature"]),
            "signature_fields_disagree",
        ),
        _invalid(
            "signature-from-another-receipt",
            "signature (and authoritySignature) copied from another receipt by the same key.",
            tampered(permit, signature=deny["signature"], authoritySignature=deny["signature"]),
            "bad_signature",
        ),
        _invalid(
            "signature-bit-flipped",
            "One bit of the signature flipped.",
            _with_signature(permit, _flip(permit["signature"])),
            "bad_signature",
        ),
        _invalid(
            "signature-truncated",
            "The signature is valid base64 of 63 bytes.",
            _with_signature(permit, SIGNATURE_PREFIX + base64.b64encode(bytes(63)).decode()),
            "bad_signature",
        ),
        _invalid(
            "signature-not-base64",
            "The signature after `ed25519:` is not base64.",
            _with_signature(permit, SIGNATURE_PREFIX + "not base64!"),
            "bad_signature",
        ),
        _invalid(
            "signature-urlsafe-base64",
            "The signature in the URL-safe base64 alphabet; only the standard alphabet is "
            "accepted.",
            _with_signature(permit, _urlsafe(permit["signature"])),
            "bad_signature",
        ),
        _invalid(
            "signature-without-prefix",
            "The signature lacks the `ed25519:` prefix.",
            _with_signature(permit, permit["signature"].removeprefix(SIGNATURE_PREFIX)),
            "malformed_receipt",
        ),
        _invalid(
            "signature-missing",
            "No signature and no authoritySignature.",
            without(permit, "signature", "authoritySignature"),
            "malformed_receipt",
        ),
    ]
    return vectors


def _with_signature(receipt: dict[str, Any], signature: str) -> dict[str, Any]:
    return tampered(receipt, signature=signature, authoritySignature=signature)


def _flip(signature: str) -> str:
    raw = bytearray(base64.b64decode(signature.removeprefix(SIGNATURE_PREFIX)))
    raw[10] ^= 0x01
    return SIGNATURE_PREFIX + base64.b64encode(bytes(raw)).decode()


def _urlsafe(signature: str) -> str:
    raw = base64.b64decode(signature.removeprefix(SIGNATURE_PREFIX))
    return SIGNATURE_PREFIX + base64.urlsafe_b64encode(raw).decode()


def malformed_vectors() -> list[Vector]:
    permit = make_receipt("malformed-permit")
    return [
        _invalid(
            "receipt-not-an-object", "The receipt is a JSON array.", [permit], "malformed_receipt"
        ),
        _invalid(
            "receipt-without-key-id",
            "No key_id field.",
            without(permit, "key_id"),
            "malformed_receipt",
        ),
        _invalid(
            "key-id-not-a-string",
            "key_id is a number.",
            tampered(permit, key_id=12345),
            "malformed_receipt",
        ),
        _invalid(
            "timestamp-missing",
            "No timestamp field.",
            without(permit, "timestamp"),
            "malformed_receipt",
        ),
        _invalid(
            "timestamp-without-time-zone",
            "timestamp 2025-06-01T12:00:00.000 has no time zone (signed so): not RFC 3339.",
            make_receipt("no-tz", edit_unsigned=_set("timestamp", "2025-06-01T12:00:00.000")),
            "malformed_receipt",
        ),
        _invalid(
            "timestamp-not-a-string",
            "timestamp is a number (signed so).",
            make_receipt("ts-number", edit_unsigned=_set("timestamp", 1748779200000)),
            "malformed_receipt",
        ),
        _invalid(
            "decision-missing",
            "No decision field (signed so).",
            make_receipt("no-decision", edit_unsigned=_drop("decision")),
            "malformed_receipt",
        ),
        _invalid(
            "decision-lowercase",
            'decision "permit" (signed so): decisions are upper case.',
            make_receipt("lower-decision", edit_unsigned=_set("decision", "permit")),
            "malformed_receipt",
        ),
        _invalid(
            "permit-without-expires-at",
            "An authentically signed PERMIT with no expires_at: not usable, so not authentic.",
            make_receipt("no-expiry", edit_unsigned=_drop("expires_at")),
            "malformed_receipt",
        ),
        _invalid(
            "permit-expires-at-unparseable",
            "An authentically signed PERMIT whose expires_at is not a timestamp.",
            make_receipt("bad-expiry", edit_unsigned=_set("expires_at", "tomorrow")),
            "malformed_receipt",
        ),
    ]


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    def edit(receipt: dict[str, Any]) -> None:
        del receipt[name]

    return edit


UNICODE_ACTOR = "Zoë-Ωmega-機械-🚀-bot"
ESCAPES = (
    'quote " backslash \\ slash / newline \n tab \t return \r backspace \b formfeed \f '
    "nul \u0000 unit-sep \u001f del \u007f line-sep \u2028 para-sep \u2029 bom \ufeff"
)
KEY_ORDER_PROBE = {
    "\ue000": "U+E000 sorts after the emoji in UTF-16 code units",
    "😀": "U+1F600 is the surrogate pair D83D DE00",
    "a": 1,
    "é": 2,
    "Z": 3,
    "": "empty key sorts first",
    "10": "strings, not numbers: '10' < '9'",
    "9": 4,
    "aa": 5,
    "A": 6,
}
LARGE_NUMBERS = {
    "max_safe_integer": 9007199254740991,
    "min_safe_integer": -9007199254740991,
    "float_1e20": 1e20,
    "float_1e21": 1e21,
    "float_1e23": 1e23,
    "max_double": 1.7976931348623157e308,
    "big_fraction": 123456789012.5,
}
FRACTIONAL_NUMBERS = {
    "tenth": 0.1,
    "point_three": 0.30000000000000004,
    "micro": 1e-6,
    "below_micro": 1e-7,
    "small": 1.5e-7,
    "negative_small": -1e-7,
    "min_subnormal": 5e-324,
    "thirds": 333333333.3333333,
    "eighth": 123456789.125,
    "price": 4.35,
}
INTEGRAL_NUMBERS = {
    "one_point_zero": 1.0,
    "negative_zero": -0.0,
    "zero": 0,
    "negative": -1,
    "two_fifty_float": 250.0,
    "nested": [1.0, [0.5, {"x": -0.0}], True, False, None, {}, []],
}


def jcs_vectors() -> list[Vector]:
    deny_unicode = make_receipt(
        "jcs-unicode",
        outcome=Outcome.DENY,
        rule_id="wrong-branch",
        request=DENY_REQUEST | {"actor": UNICODE_ACTOR, "request_id": "req-✓-🚀-\u2028"},
        message="Nur main darf ausgeliefert werden — « déployer » 🚫",
    )
    deny_escapes = make_receipt(
        "jcs-escapes",
        outcome=Outcome.DENY,
        rule_id="wrong-branch",
        request=DENY_REQUEST | {"actor": 'bot "quoted" \\ back'},
        message=ESCAPES,
    )
    big_int_receipt = make_receipt("jcs-big-int-base", extra={"amount": 0})
    payload = signing_payload(big_int_receipt).replace(b'"amount":0', b'"amount":9007199254740993')
    big_int = sign_raw_payload(big_int_receipt | {"amount": 9007199254740993}, payload, PRIMARY)
    return [
        _valid(
            "jcs-unicode-strings",
            "Non-ASCII actor, message and request_id (Latin, Greek, CJK, emoji, U+2028): "
            "JCS writes them as raw UTF-8.",
            deny_unicode,
        ),
        _valid(
            "jcs-unicode-strings-ascii-escaped-file",
            "The same receipt, but this file writes every non-ASCII character as a \\u "
            "escape: the parsed strings, and so the payload, are identical.",
            deny_unicode,
            ascii_only=True,
        ),
        _valid(
            "jcs-string-escapes",
            "A message with quote, backslash, slash, control characters, DEL, U+2028/2029 and "
            'a BOM: JCS escapes only " \\ and U+0000-U+001F (\\b \\t \\n \\f \\r short forms).',
            deny_escapes,
        ),
        _valid(
            "jcs-key-ordering",
            "An extra signed object whose keys must be sorted by UTF-16 code units (the emoji "
            "U+1F600 sorts before U+E000), not by code point or UTF-8 bytes.",
            make_receipt("jcs-keys", extra={"labels": KEY_ORDER_PROBE}),
        ),
        _valid(
            "jcs-numbers-large",
            "An extra signed object of large numbers: 2^53-1, 1e20 (written out), 1e21 "
            "(exponent form 1e+21), 1e23, the largest double.",
            make_receipt("jcs-large", extra={"numbers": LARGE_NUMBERS}),
        ),
        _valid(
            "jcs-numbers-fractional",
            "Fractional numbers: 0.1, 0.30000000000000004, 1e-6 (0.000001), 1e-7 (1e-7), "
            "5e-324, 333333333.3333333 - shortest round-trip form (ECMAScript Number::toString).",
            make_receipt("jcs-fractional", extra={"numbers": FRACTIONAL_NUMBERS}),
        ),
        _valid(
            "jcs-numbers-integral-and-literals",
            "1.0 and 250.0 canonicalize as 1 and 250, -0.0 as 0; nested arrays, true, false, "
            "null, {} and [].",
            make_receipt("jcs-integral", extra={"numbers": INTEGRAL_NUMBERS}),
        ),
        _invalid(
            "jcs-integer-beyond-safe-range",
            "amount 9007199254740993 (2^53+1) signed as written. It is outside the I-JSON range "
            "RFC 8785 canonicalizes (a double cannot hold it), so no verifier can reproduce the "
            "signed bytes: bad_signature, never valid.",
            big_int,
            "bad_signature",
        ),
        _invalid(
            "jcs-unicode-normalization-tampered",
            "The actor's 'ë' (U+00EB) replaced by 'e' + U+0308 after signing: verifiers must "
            "not normalize Unicode.",
            tampered(deny_unicode, actor=UNICODE_ACTOR.replace("ë", "e\u0308")),
            "bad_signature",
        ),
    ]


ESCALATE_REQUEST = PERMIT_REQUEST | {"request_id": "req-0003"}
APPROVER_KEY_IDS = ("key_01j00000000000000000000001", "key_01j00000000000000000000002")


def make_escalation(
    name: str, *, edit_unsigned: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """An ESCALATE as the server builds it (docs/approvals.md): quorum 2, 30 minutes."""
    moment = ts("2025-06-01T12:00:00.000Z")
    decision = Decision(
        Outcome.ESCALATE,
        "needs-approval",
        Reason.APPROVAL_REQUIRED,
        "rule needs-approval requires approval",
        escalation=Escalation(quorum=2, approval_ttl_seconds=1800),
    )
    receipt_id, execution_id = _ids(name, moment)
    signer = PRIMARY.signer()
    unsigned = build_receipt(
        receipt_id=receipt_id,
        execution_id=execution_id,
        request=parse_execute_request(dict(ESCALATE_REQUEST), None),
        decision=decision,
        policy=POLICY,
        org_id=ORG_ID,
        issuer=ISSUER,
        now=moment,
        key_id=signer.key_id,
    )
    if edit_unsigned is not None:
        edit_unsigned(unsigned)
    return sign_receipt(unsigned, signer)[0]


def make_outcome(name: str, escalation: dict[str, Any], outcome: str) -> dict[str, Any]:
    """The final receipt of ``escalation``: ``approved`` by both approvers, or not."""
    moment = ts("2025-06-01T12:10:00.000Z")
    approvers = [
        {"key_id": key_id, "vote": "approve", "reason": "checked", "at": f"2025-06-01T12:0{i}:00Z"}
        for i, key_id in enumerate(APPROVER_KEY_IDS, start=5)
    ]
    receipt_id, execution_id = _ids(name, moment)
    signer = PRIMARY.signer()
    unsigned = build_outcome_receipt(
        escalation,
        receipt_id=receipt_id,
        execution_id=execution_id,
        outcome=outcome,
        approvers=approvers if outcome == "approved" else [],
        now=moment,
        # Unexpired at every "now" the vectors are checked at, like the other PERMITs.
        permit_ttl_seconds=_ttl_until("2025-06-01T12:10:00.000Z", FAR_FUTURE),
        key_id=signer.key_id,
    )
    return sign_receipt(unsigned, signer)[0]


def approval_vectors() -> list[Vector]:
    escalation = make_escalation("escalate")
    permit = make_outcome("escalate-approved", escalation, "approved")
    return [
        _valid(
            "escalate-valid",
            "An ESCALATE (held for approval): authentic, BLOCKED, never a permission.",
            escalation,
        ),
        _valid(
            "permit-after-approval-valid",
            "The PERMIT an approval issued: approval_id, escalation_receipt_id and the two "
            f"approvers ({', '.join(APPROVER_KEY_IDS)}) are signed.",
            permit,
        ),
        _valid(
            "deny-after-rejection-valid",
            "The DENY a rejection issued (approval_outcome rejected, no approvers).",
            make_outcome("escalate-rejected", escalation, "rejected"),
        ),
        _invalid(
            "tampered-approval-approvers",
            "A PERMIT of an approval with an approver added after signing.",
            tampered(permit, approvers=[*permit["approvers"], {"key_id": "key_attacker"}]),
            "bad_signature",
        ),
        _invalid(
            "tampered-escalate-to-permit",
            "An ESCALATE whose decision was changed to PERMIT after signing.",
            tampered(escalation, decision="PERMIT", expires_at=FAR_FUTURE),
            "bad_signature",
        ),
        _invalid(
            "escalate-without-approval-id",
            "An authentically signed ESCALATE that names no approval to follow.",
            make_escalation("escalate-no-approval", edit_unsigned=_drop("approval_id")),
            "malformed_receipt",
        ),
    ]


# --- bound grants (docs/receipts.md, "Constraints") ------------------------------

TRANSFER_REQUEST: dict[str, Any] = {
    "surface": "payments.transfer",
    "action": "transfer",
    "actor": "agent-7",
    "payload": {"amount": 120, "currency": "EUR", "to": "acct-42"},
    "request_id": "req-0004",
}
TRANSFER_CONSTRAINTS: dict[str, Any] = {
    "max_amount": 500,
    "currency": "EUR",
    "allowed_resources": ["acct-42", "acct-43"],
    "allowed_commands": ["git", ["make", "deploy"]],
    "allowed_tool_args": {"to": ["acct-42", "acct-43"], "fee": {"min": 0, "max": 2.5}},
}


def make_bound_permit(name: str, constraints: Mapping[str, Any] = TRANSFER_CONSTRAINTS) -> Any:
    return make_receipt(
        name,
        request=TRANSFER_REQUEST,
        rule_id="agent-transfers",
        constraints=constraints,
        single_use=True,
    )


def constraint_vectors() -> list[Vector]:
    permit = make_bound_permit("bound")
    raised = permit["constraints"] | {"max_amount": 50000}
    return [
        _valid(
            "permit-with-constraints-valid",
            "A PERMIT carrying a bound grant: constraints (every well-known one) and "
            "single_use are signed like every other field.",
            permit,
        ),
        _valid(
            "permit-with-custom-constraint-valid",
            "A PERMIT carrying an organization's own x_ constraint: authentic; an intent "
            "check without a checker for it refuses (intent.json).",
            make_bound_permit("bound-custom", {"x_region": "eu-west-1"}),
        ),
        _invalid(
            "tampered-constraints-raised",
            "A bound PERMIT whose max_amount was raised after signing.",
            tampered(permit, constraints=raised),
            "bad_signature",
        ),
        _invalid(
            "tampered-constraints-removed",
            "A bound PERMIT whose constraints were removed after signing.",
            without(permit, "constraints"),
            "bad_signature",
        ),
        _invalid(
            "tampered-single-use-removed",
            "A single-use PERMIT whose single_use was removed after signing.",
            without(permit, "single_use"),
            "bad_signature",
        ),
        _invalid(
            "constraints-not-an-object",
            "An authentically signed PERMIT whose constraints is a list.",
            make_receipt(
                "bound-list", request=TRANSFER_REQUEST, extra={"constraints": ["max_amount"]}
            ),
            "malformed_receipt",
        ),
    ]


def _intent(**changes: Any) -> dict[str, Any]:
    """An intent every constraint of TRANSFER_CONSTRAINTS allows, with ``changes``."""
    intent: dict[str, Any] = {
        "surface": "payments.transfer",
        "action": "transfer",
        "actor": "agent-7",
        "request_digest": parse_execute_request(dict(TRANSFER_REQUEST), None).digest,
        "amount": 120,
        "currency": "EUR",
        "command": ["make", "deploy"],
        "resources": ["acct-42"],
        "tool_args": {"to": "acct-42", "fee": 2.5, "memo": "rent"},
    }
    for name, value in changes.items():
        if value is None:
            intent.pop(name, None)
        else:
            intent[name] = value
    return intent


def intent_cases() -> list[dict[str, Any]]:
    """What "the executor is about to do" against a PERMIT: the expected intent check.

    The reason codes are the SDKs' (``execauth_client.intent``, ``intent.ts``).
    """
    bound = "cases/permit-with-constraints-valid.json"
    ok: dict[str, Any] = {"ok": True, "reason": None}

    def refused(reason: str) -> dict[str, Any]:
        return {"ok": False, "reason": reason}

    cases: list[tuple[str, str, str, dict[str, Any], dict[str, Any]]] = [
        ("within-every-constraint", "Every value inside the grant.", bound, _intent(), ok),
        ("amount-at-the-limit", "max_amount is inclusive.", bound, _intent(amount=500), ok),
        ("amount-fractional-within", "A decimal amount under the limit.", bound,
         _intent(amount=499.99), ok),
        ("amount-over-the-limit", "120 → 500.01.", bound, _intent(amount=500.01),
         refused("constraint_exceeded:max_amount")),
        ("amount-missing", "The intent states no amount: cannot be checked.", bound,
         _intent(amount=None), refused("constraint_unverifiable:max_amount")),
        ("amount-as-text", "An amount given as a string is not a number.", bound,
         _intent(amount="120"), refused("constraint_unverifiable:max_amount")),
        ("currency-differs", "USD under an EUR grant.", bound, _intent(currency="USD"),
         refused("constraint_exceeded:currency")),
        ("currency-case-differs", "Currency codes compare exactly.", bound,
         _intent(currency="eur"), refused("constraint_exceeded:currency")),
        ("command-program-name", "A string entry matches argv[0] exactly, any arguments.",
         bound, _intent(command=["git", "push", "--force"]), ok),
        ("command-path-is-not-the-name", "'git' does not match '/usr/bin/git'.", bound,
         _intent(command=["/usr/bin/git", "status"]),
         refused("constraint_exceeded:allowed_commands")),
        ("command-argv-entry-exact", "A list entry matches the whole argv only.", bound,
         _intent(command=["make", "deploy", "prod"]),
         refused("constraint_exceeded:allowed_commands")),
        ("command-as-a-string", "A command string would need shell splitting: refused.",
         bound, _intent(command="make deploy"),
         refused("constraint_unverifiable:allowed_commands")),
        ("resource-not-allowed", "One resource outside the list.", bound,
         _intent(resources=["acct-42", "acct-99"]),
         refused("constraint_exceeded:allowed_resources")),
        ("tool-arg-value-not-allowed", "to is not one of the listed values.", bound,
         _intent(tool_args={"to": "acct-99", "fee": 1}),
         refused("constraint_exceeded:allowed_tool_args.to")),
        ("tool-arg-above-bound", "fee above its max.", bound,
         _intent(tool_args={"to": "acct-42", "fee": 2.51}),
         refused("constraint_exceeded:allowed_tool_args.fee")),
        ("tool-arg-boolean-is-not-a-number", "true is not a number within bounds.", bound,
         _intent(tool_args={"to": "acct-42", "fee": True}),
         refused("constraint_exceeded:allowed_tool_args.fee")),
        ("tool-arg-missing", "A constrained argument left out (its default is unknown).",
         bound, _intent(tool_args={"to": "acct-42"}),
         refused("constraint_unverifiable:allowed_tool_args.fee")),
        ("surface-differs", "The PERMIT is for another surface.", bound,
         _intent(surface="payments.refund"), refused("surface_mismatch")),
        ("actor-differs", "The PERMIT is for another actor.", bound, _intent(actor="agent-8"),
         refused("actor_mismatch")),
        ("action-differs", "The PERMIT is for another action.", bound,
         _intent(action="refund"), refused("action_mismatch")),
        ("request-digest-differs", "The PERMIT was issued for another request.", bound,
         _intent(request_digest="sha256:" + "0" * 64), refused("request_digest_mismatch")),
        ("custom-constraint-unknown", "No checker for x_region: refused.",
         "cases/permit-with-custom-constraint-valid.json", _intent(),
         refused("constraint_unknown:x_region")),
        ("unbound-permit", "A PERMIT without constraints covers its own request.",
         "cases/permit-valid.json",
         {"surface": "deploy.production", "action": "deploy", "actor": "release-bot"}, ok),
        ("deny-is-not-a-permit", "A DENY never covers an intent.", "cases/deny-valid.json",
         {"surface": "deploy.production", "action": "deploy", "actor": "release-bot"},
         refused("not_permit")),
    ]  # fmt: skip
    return [
        {"name": name, "description": description, "receipt": receipt, "now": NOW,
         "intent": intent, "expected": expected}
        for name, description, receipt, intent, expected in cases
    ]  # fmt: skip


def all_vectors() -> list[Vector]:
    vectors = (
        valid_vectors()
        + key_vectors()
        + tamper_vectors()
        + malformed_vectors()
        + jcs_vectors()
        + approval_vectors()
        + constraint_vectors()
    )
    names = [v.name for v in vectors]
    assert len(names) == len(set(names)), "vector names must be unique"
    return vectors


# --- output -----------------------------------------------------------------------

README_NOTE = "TEST ONLY: these private keys are published; never trust them for anything."


def _dump(document: Any, *, ascii_only: bool = False) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=ascii_only) + "\n").encode("utf-8")


def _payload_text(receipt: Any) -> str | None:
    if not isinstance(receipt, dict):
        return None
    try:
        return signing_payload(receipt).decode("utf-8")
    except (rfc8785.CanonicalizationError, UnicodeDecodeError):
        return None


def build_files() -> dict[str, bytes]:
    """Every file under testdata/vectors/ except README.md, by relative path."""
    files: dict[str, bytes] = {}
    for name, keylist in _keylists().items():
        files[f"keylists/{name}.json"] = _dump(keylist)
    files["keys/test-keys.json"] = _dump(
        {
            "warning": README_NOTE,
            "derivation": "seed = SHA-256('execauth test vector key <name> - TEST ONLY')",
            "keys": [
                {
                    "name": k.name,
                    "role": k.role,
                    "key_id": k.key_id,
                    "seed_hex": k.seed_hex,
                    "public_key_hex": k.raw_public.hex(),
                }
                for k in ALL_KEYS
            ],
        }
    )
    index: list[dict[str, Any]] = []
    for vector in all_vectors():
        path = f"cases/{vector.name}.json"
        document = {
            "name": vector.name,
            "description": vector.description,
            "now": NOW,
            "keys": f"keylists/{vector.keys}.json",
            "expected": vector.expected(),
            "signing_payload": _payload_text(vector.receipt),
            "receipt": vector.receipt,
        }
        files[path] = _dump(document, ascii_only=vector.ascii_only)
        index.append(
            {
                "name": vector.name,
                "file": path,
                "keys": document["keys"],
                "expected": document["expected"],
            }
        )
    files["index.json"] = _dump(
        {
            "format": FORMAT_VERSION,
            "generator": "scripts/generate_vectors.py",
            "now": NOW,
            "clock_independent_between": ["2025-06-01T12:10:00.000Z", FAR_FUTURE],
            "reasons": [
                "valid",
                "malformed_receipt",
                "signature_fields_disagree",
                "unknown_key",
                "revoked_key",
                "key_not_valid_at_timestamp",
                "issuer_mismatch",
                "bad_signature",
                "receipt_hash_mismatch",
            ],
            "vectors": index,
        }
    )
    files["intent.json"] = _dump(
        {
            "format": FORMAT_VERSION,
            "generator": "scripts/generate_vectors.py",
            "about": "Intent checks (execauth_client.check_intent, checkIntent): a receipt "
            "file, what the executor is about to do, and the expected answer. The receipt "
            "is taken as already verified; 'now' is the check's clock.",
            "cases": intent_cases(),
        }
    )
    return files


def generated_paths(directory: Path) -> set[str]:
    """Files the generator owns under ``directory`` (README.md is written by hand)."""
    return {p.relative_to(directory).as_posix() for p in directory.rglob("*.json") if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    parser.add_argument("--out", type=Path, default=VECTORS_DIR)
    args = parser.parse_args(argv)
    files = build_files()
    out: Path = args.out
    if args.check:
        stale = sorted(
            path
            for path, data in files.items()
            if not (out / path).is_file() or (out / path).read_bytes() != data
        ) + sorted(generated_paths(out) - files.keys())
        for path in stale:
            print(f"stale: {path}", file=sys.stderr)
        return 1 if stale else 0
    for path in generated_paths(out) - files.keys():
        (out / path).unlink()
    for path, data in files.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    print(f"wrote {len(files)} files to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
