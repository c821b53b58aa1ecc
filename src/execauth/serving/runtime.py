"""Wiring: build every long-lived object of a running service from ``Settings``.

``bootstrap`` is what ``execauth serve`` and the tests call; the app factory
(``execauth.api.app.create_app``) takes the resulting ``Runtime``. No globals.
"""

from __future__ import annotations

import gc
import hmac
import logging
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine

from execauth.config import Settings
from execauth.keyring import (
    Keyring,
    KeyUnsealError,
    choose_signing_key,
    generate_signing_key,
)
from execauth.observability.metrics import Metrics, StoreCollector
from execauth.server_secret import ServerSecret
from execauth.serving.write_path import ReceiptSink, WritePath, build_write_path
from execauth.store.audit import AuditStore
from execauth.store.control import ControlStore
from execauth.store.database import (
    log_apart,
    log_file_of,
    logs_in_place,
    make_engine,
    schema_is_current,
    upgrade,
)
from execauth.store.executions import ExecutionStore
from execauth.store.ledger import LogStore
from execauth.store.signing_keys import SigningKeyStore
from execauth.streaming.metrics import StreamCollector
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Plan

log = logging.getLogger("execauth")
ADMIN_TOKEN_SETTING = "admin_token_hash"  # noqa: S105 - a settings row name, not a secret
ADMIN_TOKEN_PURPOSE = "admin-token-hash-v1"  # noqa: S105 - an HKDF label


class AdminAuth:
    """The platform administrator's bootstrap token (docs/api.md, "Authentication")."""

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
    write_path: WritePath  # where receipts become durable (serving/write_path.py)
    admin: AdminAuth
    metrics: Metrics
    plans: dict[str, Plan]
    generated_admin_token: str | None = None
    started: bool = field(default=False)

    @property
    def writer(self) -> ReceiptSink:
        """Where this process commits its receipts: commit, and answer once durable."""
        return self.write_path.sink

    def start(self) -> None:
        """Start the writer (idempotent); the app's lifespan calls this."""
        if not self.started:
            self.write_path.start()
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
            self.write_path.stop()
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
        if log_apart(engine):
            _check_log_file(engine)
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


def _check_log_file(engine: Engine) -> None:
    """Refuse to serve a SQLite database whose log file was lost, or restored from another
    point in time: serving would fail on every log query, or sign logs whose entries
    name receipts that do not exist (docs/operations.md, "Backup and restore")."""
    log_file = log_file_of(engine.url.database)
    restore = ' restore both files of one backup (docs/operations.md, "Backup and restore")'
    if not logs_in_place(engine):
        raise SystemExit(
            f"execauth: {log_file} does not hold the Merkle logs, or not alone (an interrupted"
            f" migration: run it again);{restore}"
        )
    ahead = LogStore(engine).logs_ahead_of_receipts()
    if ahead:
        raise SystemExit(
            f"execauth: {log_file} is newer than the database: the logs of {', '.join(ahead)}"
            f" end in receipts it does not hold;{restore}"
        )


def open_runtime(
    settings: Settings,
    *,
    schema: str | None = None,
    migrate: bool = False,
    writer_socket: str | None = None,
) -> Runtime:
    """Every long-lived object of one serving process, over an already prepared database.

    With ``writer_socket`` receipts are stored by the writer process listening there
    (``execauth.serving.writer_process``) instead of a writer thread of this process.
    """
    secret, engine = open_stores(settings, migrate=migrate, schema=schema)
    control = ControlStore(engine)
    signing_keys = SigningKeyStore(engine)
    keyring = Keyring(signing_keys, secret)
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
    write_path = build_write_path(
        settings, engine, secret, keyring, metrics, writer_socket=writer_socket
    )
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
        signing_keys=signing_keys,
        keyring=keyring,
        write_path=write_path,
        admin=AdminAuth(secret, token=settings.admin_token, token_hash=token_hash),
        metrics=metrics,
        plans=settings.plan_catalog(),
    )


def freeze_startup_objects() -> None:
    """Take what is alive once a process has started out of the garbage collector's reach.

    Modules, the policy engine's machinery, the stores and the caches live as long as
    the process: about 150,000 tracked objects that every full collection would walk
    again (57–77 ms each, measured in a loaded gateway process), while requests wait.
    ``gc.freeze`` moves them to a permanent generation; later objects are collected as
    before.
    """
    gc.collect()
    gc.freeze()
