"""Signing keys: generation, sealing at rest, publication, and the active signer.

Private keys never leave this module unsealed except inside ``ActiveSigner``.
At rest they are sealed with AES-256-GCM under a key derived from
``EXECAUTH_SECRET_KEY``; the key id is the associated data, so a sealed blob
moved to another key's row fails to open.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from nacl.signing import SigningKey

from execauth.errors import SigningUnavailable
from execauth.server_secret import ServerSecret
from execauth.verify import key_id_for
from execauth.wire_time import format_timestamp, truncate_to_millis

SEAL_PURPOSE = "signing-key-seal-v1"
KEY_LIST_CACHE_TTL = 3600
# After a rotation the old key keeps signing validity this long, so that every
# instance has re-read the key table (each does so every second) before the
# old key's window closes: no receipt is ever signed outside its key's window.
ROTATION_OVERLAP = timedelta(seconds=60)


def publication_lead(refresh_interval_seconds: float) -> timedelta:
    """How long before its first signature a key rotated by hand is published.

    Each instance (and each worker process) re-reads the key table once per refresh
    interval and serves the key list it last read. Were a new key to sign on the first
    process that read it, a client refetching the list from a process that had not yet
    read it would call a genuine receipt ``unknown_key``. Two intervals: one for every
    process to read the table, one for a slow refresh or clocks that differ a little
    between machines. The same rule as scheduled rotation: published, then signing.
    """
    return timedelta(seconds=2 * refresh_interval_seconds)


def choose_signing_key(
    records: Iterable[SigningKeyRecord], now: datetime
) -> SigningKeyRecord | None:
    """The newest key that may sign at ``now``; ``None`` means nothing may be signed."""
    usable = [r for r in records if r.can_sign_at(now)]
    return max(usable, key=lambda r: r.created_at) if usable else None


def next_signing_change(records: Iterable[SigningKeyRecord], now: datetime) -> datetime | None:
    """The first instant after ``now`` at which a key's signing window opens or closes.

    Until then ``choose_signing_key`` gives the same answer, so a keyring may keep its
    choice; from then on it must choose again. That is how a successor published ahead
    of a scheduled rotation takes over at exactly its ``created_at``, on every instance,
    without waiting for the next refresh (revocations still arrive by refresh).
    """
    moments = [
        moment
        for r in records
        if r.revoked_at is None
        for moment in (r.created_at, r.retired_at)
        if moment is not None and moment > now
    ]
    return min(moments, default=None)


def may_sign_from(record: SigningKeyRecord, now: datetime) -> bool:
    """Whether ``record`` signs at ``now`` or will later (not revoked, window not closed)."""
    return record.revoked_at is None and (record.retired_at is None or now < record.retired_at)


def needs_replacement(
    records: Iterable[SigningKeyRecord], revoked_key_id: str, now: datetime
) -> bool:
    """Whether revoking ``revoked_key_id`` leaves no key to sign with beyond a rotation overlap.

    A key rotated in moments ago already has that role; adding another would
    leave two active keys with no end date.
    """
    return not any(
        r.key_id != revoked_key_id and r.can_sign_at(now) and r.retired_at is None for r in records
    )


@dataclass(frozen=True, slots=True)
class RotationSchedule:
    """Automatic rotation: each key signs for ``period``; its successor is published
    ``overlap`` before it takes over, so clients that cache the key list (``cache_ttl``)
    or pin it have the new key before any receipt is signed with it."""

    period: timedelta
    overlap: timedelta


@dataclass(frozen=True, slots=True)
class DueRotation:
    """A rotation the schedule asks for now: ``current_key_id`` hands over at ``hands_over_at``."""

    current_key_id: str
    hands_over_at: datetime


def due_rotation(
    records: Iterable[SigningKeyRecord], now: datetime, schedule: RotationSchedule
) -> DueRotation | None:
    """The rotation due at ``now``, or ``None``.

    The current key is the newest one without an end (neither retired nor revoked):
    after a rotation that is the successor, so one rotation happens per period. It is
    due from ``created_at + period - overlap``; the handover is at ``created_at +
    period``, or ``now + overlap`` when the service was not running at the due time, so
    a successor is always published a full overlap before it signs.
    """
    open_ended = [r for r in records if r.retired_at is None and r.revoked_at is None]
    if not open_ended:
        return None  # nothing signs without an end: rotate/revoke by hand or restart
    current = max(open_ended, key=lambda r: r.created_at)
    hands_over_at = current.created_at + schedule.period
    if now < hands_over_at - schedule.overlap:
        return None
    return DueRotation(
        current.key_id, truncate_to_millis(max(hands_over_at, now + schedule.overlap))
    )


class KeyUnsealError(Exception):
    """A sealed private key could not be opened: wrong EXECAUTH_SECRET_KEY or tampered row."""


@dataclass(frozen=True, slots=True)
class SigningKeyRecord:
    """A signing key as stored: public part in clear, private part sealed."""

    key_id: str
    public_key: bytes  # raw 32 bytes
    sealed_private_key: bytes
    created_at: datetime
    retired_at: datetime | None
    revoked_at: datetime | None

    def status(self) -> str:
        """The published status: ``revoked`` or ``active``, nothing else (docs/receipts.md).

        A key past its retirement is still ``active``: its ``expires_at`` already
        tells a verifier that receipts dated from then on do not verify with it,
        and a third value would make a client that checks the published enum
        reject the whole list (docs/decisions.md, "key status").
        """
        return "revoked" if self.revoked_at is not None else "active"

    def can_sign_at(self, now: datetime) -> bool:
        """Inside its signing window ``created_at <= now < retired_at`` and not revoked."""
        return (
            self.revoked_at is None
            and self.created_at <= now
            and (self.retired_at is None or now < self.retired_at)
        )


class ActiveSigner:
    """The key that signs new receipts (satisfies ``receipts.Signer``).

    Signs through libsodium (PyNaCl), every other use of the key goes through
    ``cryptography``: Ed25519 is deterministic (RFC 8032), so both give the same bytes
    for the same key and message, and libsodium takes 22 µs where ``cryptography``
    takes 34 µs for a receipt, on every decision (docs/decisions.md). Only libsodium's
    key is kept: the ``cryptography`` one it was made from is not needed again.
    """

    def __init__(self, key_id: str, private_key: Ed25519PrivateKey) -> None:
        self._key_id = key_id
        self._signing_key = SigningKey(private_key.private_bytes_raw())

    @property
    def key_id(self) -> str:
        return self._key_id

    def sign(self, data: bytes) -> bytes:
        return self._signing_key.sign(data).signature


def generate_signing_key(secret: ServerSecret, now: datetime) -> SigningKeyRecord:
    """A fresh Ed25519 key, sealed for storage."""
    private_key = Ed25519PrivateKey.generate()
    raw_public = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_id = key_id_for(raw_public)
    return SigningKeyRecord(
        key_id=key_id,
        public_key=raw_public,
        sealed_private_key=seal_private_key(secret, key_id, private_key),
        # Millisecond precision, like receipt timestamps and the published list, so the
        # server's idea of a key's window and a verifier's can never differ.
        created_at=truncate_to_millis(now),
        retired_at=None,
        revoked_at=None,
    )


def seal_private_key(secret: ServerSecret, key_id: str, private_key: Ed25519PrivateKey) -> bytes:
    raw = private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    nonce = os.urandom(12)
    return nonce + AESGCM(secret.derive(SEAL_PURPOSE)).encrypt(nonce, raw, key_id.encode())


def unseal_signer(secret: ServerSecret, record: SigningKeyRecord) -> ActiveSigner:
    """Open ``record``'s private key; refuse one whose public half does not match."""
    sealed = record.sealed_private_key
    try:
        raw = AESGCM(secret.derive(SEAL_PURPOSE)).decrypt(
            sealed[:12], sealed[12:], record.key_id.encode()
        )
    except InvalidTag as exc:
        raise KeyUnsealError(
            f"cannot open signing key {record.key_id}: EXECAUTH_SECRET_KEY differs from the one "
            "that sealed it, or the stored key was altered"
        ) from exc
    private_key = Ed25519PrivateKey.from_private_bytes(raw)
    derived = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    if derived != record.public_key:
        raise KeyUnsealError(f"signing key {record.key_id}: private and public halves differ")
    return ActiveSigner(record.key_id, private_key)


def _spki_base64(raw_public: bytes) -> str:
    spki = Ed25519PublicKey.from_public_bytes(raw_public).public_bytes(
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(spki).decode("ascii")


def key_list_entry(record: SigningKeyRecord) -> dict[str, Any]:
    """One entry of the published key list.

    ``expires_at`` is when the key stops (or stopped) signing: its retirement
    time, set at rotation; absent while no successor exists (optional rather than
    nullable: docs/receipts.md, "Key lists"). A receipt dated at or after it does
    not verify with this key.
    """
    ended = record.retired_at or record.revoked_at
    entry = {
        "id": record.key_id,
        "key_id": record.key_id,
        "algorithm": "Ed25519",
        "public_key": _spki_base64(record.public_key),
        "created_at": format_timestamp(record.created_at),
        "status": record.status(),
    }
    if ended is not None:
        entry["expires_at"] = format_timestamp(ended)
    return entry


def key_list_document(records: Iterable[SigningKeyRecord], issuer: str) -> dict[str, Any]:
    """``GET /.well-known/service-keys.json`` (docs/receipts.md, "Key lists")."""
    return {
        "keys": [key_list_entry(r) for r in records],
        "issuer": issuer,
        "cache_ttl": KEY_LIST_CACHE_TTL,
    }


def jwks_document(records: Iterable[SigningKeyRecord]) -> dict[str, Any]:
    """The same keys as an RFC 7517 JWK Set of RFC 8037 OKP keys."""
    keys = []
    for record in records:
        if record.revoked_at is not None:
            continue  # a JWKS consumer has no status field; a revoked key must not verify
        keys.append(
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": base64.urlsafe_b64encode(record.public_key).rstrip(b"=").decode("ascii"),
                "kid": record.key_id,
                "alg": "EdDSA",
                "use": "sig",
            }
        )
    return {"keys": keys}


log = logging.getLogger("execauth.keyring")
SERVICE_ACTOR = "service"  # the audit actor of what the service does by itself


class SigningKeySource(Protocol):
    """Where the keys are kept (``store.signing_keys.SigningKeyStore``)."""

    def all_keys(self) -> list[SigningKeyRecord]: ...

    def rotate_on_schedule(
        self, due: DueRotation, successor: SigningKeyRecord, now: datetime, actor: str
    ) -> bool: ...


class Keyring:
    """The published keys and the signer in use, refreshed from the database.

    Refreshing keeps every instance in step with ``execauth signing-keys rotate``
    and ``revoke`` run elsewhere, and with scheduled rotations. Every key that signs
    now or will later is unsealed at refresh, so that the choice of signer can follow
    key windows between refreshes (``next_signing_change``). When no key may sign,
    ``signer`` raises ``SigningUnavailable``: the gateway answers 503, never an
    unsigned receipt.
    """

    def __init__(self, store: SigningKeySource, secret: ServerSecret) -> None:
        self.store = store
        self._secret = secret
        self._lock = threading.Lock()
        self.records: list[SigningKeyRecord] = []
        self._signers: dict[str, ActiveSigner] = {}
        self._signer: ActiveSigner | None = None
        self._signer_record: SigningKeyRecord | None = None
        # The choice above holds for chosen_from <= now < chosen_until (None: no end).
        self._chosen_from = datetime.max.replace(tzinfo=UTC)
        self._chosen_until: datetime | None = None

    def refresh(self, now: datetime) -> None:
        records = self.store.all_keys()
        chosen = choose_signing_key(records, now)
        with self._lock:
            known = dict(self._signers)
        signers: dict[str, ActiveSigner] = {}
        for record in records:
            if not may_sign_from(record, now):
                continue
            try:
                signers[record.key_id] = known.get(record.key_id) or unseal_signer(
                    self._secret, record
                )
            except KeyUnsealError:
                if chosen is not None and record.key_id == chosen.key_id:
                    raise
                # A key that is not signing yet: keep the records current anyway, so the
                # signer's end is known and signing stops there (503) instead of the
                # old key signing on past the end every verifier sees.
                log.exception("signing key %s cannot be opened", record.key_id)
        with self._lock:
            self.records = records
            self._signers = signers
            self._choose(now)

    def _choose(self, now: datetime) -> None:
        """Pick the signer for ``now`` and how long that choice holds (lock held)."""
        chosen = choose_signing_key(self.records, now)
        self._signer = self._signers.get(chosen.key_id) if chosen is not None else None
        self._signer_record = chosen
        self._chosen_from = now
        self._chosen_until = next_signing_change(self.records, now)

    def signer(self, now: datetime) -> ActiveSigner:
        with self._lock:
            until = self._chosen_until
            if now < self._chosen_from or (until is not None and now >= until):
                self._choose(now)
            signer, record = self._signer, self._signer_record
        if signer is None or record is None or not record.can_sign_at(now):
            raise SigningUnavailable("no signing key is available; receipts cannot be signed")
        return signer

    def rotate_if_due(self, now: datetime, schedule: RotationSchedule) -> SigningKeyRecord | None:
        """Run the scheduled rotation due at ``now``, if any; the successor when this call did.

        Judged over the keys of the last refresh; the database makes sure that of all
        the processes finding it due, one rotates (``rotate_on_schedule``).
        """
        with self._lock:
            records = self.records
        due = due_rotation(records, now, schedule)
        if due is None:
            return None
        successor = generate_signing_key(self._secret, due.hands_over_at)
        if not self.store.rotate_on_schedule(due, successor, now, SERVICE_ACTOR):
            return None
        return successor

    def public_key(self, key_id: str) -> bytes:
        """The raw 32-byte public key of ``key_id`` (for signed-note key hashes)."""
        with self._lock:
            records = self.records
        for record in records:
            if record.key_id == key_id:
                return record.public_key
        raise SigningUnavailable(f"signing key {key_id} is not loaded")
