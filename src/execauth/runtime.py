"""Wiring: build every long-lived object of a running service from ``Settings``.

``bootstrap`` is what ``execauth serve`` and the tests call; the app factory
(``execauth.api.app.create_app``) takes the resulting ``Runtime``. No globals.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine

from execauth.config import Settings
from execauth.errors import SigningUnavailable
from execauth.keyring import (
    ActiveSigner,
    KeyUnsealError,
    RotationSchedule,
    SigningKeyRecord,
    choose_signing_key,
    due_rotation,
    generate_signing_key,
    may_sign_from,
    next_signing_change,
    unseal_signer,
)
from execauth.metrics import Metrics, StoreCollector
from execauth.server_secret import ServerSecret
from execauth.store.audit import AuditStore
from execauth.store.control import ControlStore
from execauth.store.database import make_engine, schema_is_current, upgrade
from execauth.store.executions import ExecutionStore
from execauth.store.ledger import LogStore
from execauth.store.remote_writer import RemoteReceiptWriter
from execauth.store.signing_keys import SigningKeyStore
from execauth.store.writer import ReceiptWriter
from execauth.streaming.metrics import StreamCollector
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Plan

log = logging.getLogger("execauth")
SERVICE_ACTOR = "service"  # the audit actor of what the service does by itself
ADMIN_TOKEN_SETTING = "admin_token_hash"  # noqa: S105 - a settings row name, not a secret
ADMIN_TOKEN_PURPOSE = "admin-token-hash-v1"  # noqa: S105 - an HKDF label


class Keyring:
    """The published keys and the signer in use, refreshed from the database.

    Refreshing keeps every instance in step with ``execauth signing-keys rotate``
    and ``revoke`` run elsewhere, and with scheduled rotations. Every key that signs
    now or will later is unsealed at refresh, so that the choice of signer can follow
    key windows between refreshes (``next_signing_change``). When no key may sign,
    ``signer`` raises ``SigningUnavailable``: the gateway answers 503, never an
    unsigned receipt.
    """

    def __init__(self, store: SigningKeyStore, secret: ServerSecret) -> None:
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


class AdminAuth:
    """The platform administrator's bootstrap token (DESIGN.md §3)."""

    def __init__(self, secret: ServerSecret, *, token: str | None, token_hash: str | None) -> None:
        self._secret = secret
        self._token = token
        self._token_hash = token_hash

    def check(self, presented: str) -> bool:
        if self._token is not None:
            return hmac.compare_digest(presented.encode(), self._token.encode())
        if self._token_hash is None:
            return False
        candidate = self._secret.keyed_hash(ADMIN_TOKEN_PURPOSE, presented)
        return hmac.compare_digest(candidate, self._token_hash)


@dataclass
class Runtime:
    settings: Settings
    secret: ServerSecret
    engine: Engine
    control: ControlStore
    audit: AuditStore
    executions: ExecutionStore
    logs: LogStore
    signing_keys: SigningKeyStore
    keyring: Keyring
    writer: ReceiptWriter | RemoteReceiptWriter  # remote: a worker of ``serve --workers N``
    admin: AdminAuth
    metrics: Metrics
    plans: dict[str, Plan]
    generated_admin_token: str | None = None
    started: bool = field(default=False)

    def start(self) -> None:
        """Start the writer (idempotent); the app's lifespan calls this."""
        if not self.started:
            self.writer.start()
            self.started = True

    def follow_signing_keys(self, now: datetime) -> None:
        """Re-read the signing keys, then rotate them if the schedule says so (every tick)."""
        self.keyring.refresh(now)
        schedule = self.settings.rotation_schedule()
        if schedule is None:
            return
        successor = self.keyring.rotate_if_due(now, schedule)
        if successor is not None:
            log.info(
                "scheduled key rotation: %s published, signs from %s",
                successor.key_id,
                successor.created_at.isoformat(),
            )
            self.keyring.refresh(now)

    def stop(self) -> None:
        if self.started:
            self.writer.stop()
            self.started = False
        self.engine.dispose()


def open_stores(
    settings: Settings, *, migrate: bool = True, schema: str | None = None
) -> tuple[ServerSecret, Engine]:
    secret = ServerSecret(settings.resolved_secret_key())
    engine = make_engine(settings.database_url, schema=schema)
    if migrate:
        upgrade(engine)
    return secret, engine


def bootstrap(settings: Settings, *, schema: str | None = None) -> Runtime:
    """Open the database (migrating it), ensure a signing key and an admin credential."""
    generated = prepare(settings, schema=schema)
    runtime = open_runtime(settings, schema=schema, migrate=False)
    runtime.generated_admin_token = generated
    return runtime


def prepare(settings: Settings, *, schema: str | None = None) -> str | None:
    """Migrate, ensure a usable signing key and an admin credential; once per deployment.

    Returns the admin token when this call generated it (to be shown once). ``execauth
    serve --workers N`` runs this in the parent, so that N workers never race to create
    keys or tokens; each worker then only calls ``open_runtime``.
    """
    secret, engine = open_stores(settings, schema=schema, migrate=settings.migrate_on_start)
    try:
        if not settings.migrate_on_start and not schema_is_current(engine):
            # Replicas that do not migrate must not serve an old schema, nor create one.
            raise SystemExit(
                "execauth: the database schema is not up to date and EXECAUTH_MIGRATE_ON_START "
                "is false; run `execauth db upgrade` first"
            )
        control = ControlStore(engine)
        signing_store = SigningKeyStore(engine)
        now = datetime.now(UTC)
        if choose_signing_key(signing_store.all_keys(), now) is None:
            first = generate_signing_key(secret, now)
            signing_store.insert_key(
                first, AuditEvent(None, now, "service", "signing_key.created", first.key_id)
            )
        if settings.admin_token is not None or control.get_setting(ADMIN_TOKEN_SETTING):
            return None
        candidate = "service_admin_" + secrets.token_urlsafe(32)
        candidate_hash = secret.keyed_hash(ADMIN_TOKEN_PURPOSE, candidate)
        stored = control.set_setting_if_absent(ADMIN_TOKEN_SETTING, candidate_hash)
        return candidate if stored == candidate_hash else None  # we won any race
    finally:
        engine.dispose()


def open_runtime(
    settings: Settings,
    *,
    schema: str | None = None,
    migrate: bool = False,
    writer_socket: str | None = None,
) -> Runtime:
    """Every long-lived object of one serving process, over an already prepared database.

    With ``writer_socket`` receipts are stored by the writer process listening there
    (``execauth.writer_process``) instead of a writer thread of this process.
    """
    secret, engine = open_stores(settings, migrate=migrate, schema=schema)
    control = ControlStore(engine)
    keyring = Keyring(SigningKeyStore(engine), secret)
    try:
        keyring.refresh(datetime.now(UTC))
    except KeyUnsealError as exc:
        raise SystemExit(f"execauth: {exc}") from exc
    metrics = Metrics(
        max_orgs=settings.metrics_max_orgs, max_surfaces=settings.metrics_max_surfaces
    )
    metrics.add_shared(StreamCollector(engine))
    metrics.add_shared(
        StoreCollector(engine, settings.plan_catalog(), max_orgs=settings.metrics_max_orgs)
    )
    writer: ReceiptWriter | RemoteReceiptWriter = (
        ReceiptWriter(
            engine,
            max_batch=settings.writer_max_batch,
            timeout_seconds=settings.write_timeout_seconds,
            on_commit=metrics.observe_commit,
        )
        if writer_socket is None
        else RemoteReceiptWriter(writer_socket, timeout_seconds=settings.write_timeout_seconds)
    )
    if isinstance(writer, ReceiptWriter):
        metrics.watch_writer(writer.queued)
    token_hash = (
        None if settings.admin_token is not None else control.get_setting(ADMIN_TOKEN_SETTING)
    )
    return Runtime(
        settings=settings,
        secret=secret,
        engine=engine,
        control=control,
        audit=AuditStore(engine),
        executions=ExecutionStore(engine),
        logs=LogStore(engine),
        signing_keys=keyring.store,
        keyring=keyring,
        writer=writer,
        admin=AdminAuth(secret, token=settings.admin_token, token_hash=token_hash),
        metrics=metrics,
        plans=settings.plan_catalog(),
    )
