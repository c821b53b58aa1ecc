"""One settings object, from ``EXECAUTH_*`` environment variables and an optional TOML file."""

from __future__ import annotations

import os
import secrets
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from execauth.keyring import KEY_LIST_CACHE_TTL, RotationSchedule
from execauth.tenancy.orgs import DEFAULT_PLAN, DEFAULT_PLANS, Plan


class PlanSettings(BaseModel, extra="forbid"):
    """One plan of the catalog: a monthly execute quota, or ``unmetered = true``.

    Unmetered must be said explicitly (TOML has no null, and a forgotten limit
    must not silently mean "unlimited").
    """

    executes_per_month: int | None = Field(default=None, ge=1)
    unmetered: bool = False
    requests_per_minute: int = Field(ge=1)

    @model_validator(mode="after")
    def _limit_or_unmetered(self) -> PlanSettings:
        if (self.executes_per_month is None) != self.unmetered:
            raise ValueError("give a plan executes_per_month or unmetered = true, not both")
        return self


def _default_plans() -> dict[str, PlanSettings]:
    return {
        name: PlanSettings(
            executes_per_month=plan.executes_per_month,
            unmetered=plan.executes_per_month is None,
            requests_per_minute=plan.requests_per_minute,
        )
        for name, plan in DEFAULT_PLANS.items()
    }


class Settings(BaseSettings):
    """Every knob of the service. Environment variables win over the TOML file."""

    model_config = SettingsConfigDict(env_prefix="EXECAUTH_", extra="ignore")

    database_url: str = "sqlite:///./execauth.db"
    # Sealing key for signing keys and the API-key hashing key. When unset, a
    # random one is kept in ``secret_key_file`` (created 0600 on first start).
    secret_key: str | None = Field(default=None, repr=False)
    secret_key_file: Path = Path("./execauth-secret.key")
    admin_token: str | None = Field(default=None, repr=False)
    # Written into every receipt and the key list. Empty: derived from where the service
    # listens, ``http://{host}:{port}`` (docs/decisions.md, "The issuer follows").
    issuer: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    # Serving processes of ``execauth serve`` (one Python process uses about one core).
    # Unset: one per core this process may use (``serving_processes``).
    workers: int | None = Field(default=None, ge=1, le=64)
    redis_url: str | None = None
    # A limiter that does not answer within this bound fails the request closed (503).
    rate_limit_timeout_seconds: float = 0.5
    plans: dict[str, PlanSettings] = Field(default_factory=_default_plans)
    # The plan of an organization created without one. Unset: ``unmetered`` when the
    # catalog has it, else every new organization must name its plan.
    default_plan: str | None = None
    max_body_bytes: int = 64 * 1024
    write_timeout_seconds: float = 10.0
    # Server limits, per serving process (docs/operations.md, "Server limits"): a longer
    # URL is 414, a larger head 431; a head must arrive within the head timeout and then
    # its body within the request timeout (else 408); more connections than
    # max_connections get 503; a stop waits up to shutdown_timeout for in-flight requests.
    max_url_bytes: int = Field(default=8 * 1024, ge=256)
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    request_head_timeout_seconds: float = Field(default=10.0, gt=0)
    request_timeout_seconds: float = Field(default=30.0, gt=0)
    keep_alive_timeout_seconds: float = Field(default=5.0, gt=0)
    max_connections: int = Field(default=4096, ge=1)
    shutdown_timeout_seconds: float = Field(default=30.0, gt=0)
    # Heavy operator work: replays, impact, exports, listings (api/admission.py). Per org:
    # requests per minute and at once; per serving process: at once over all orgs, and
    # how long one waits for its turn (else 429 with Retry-After).
    operator_requests_per_minute: int = Field(default=60, ge=1)
    operator_concurrency_per_org: int = Field(default=2, ge=1)
    operator_concurrency: int = Field(default=2, ge=1)
    operator_queue_seconds: float = Field(default=5.0, gt=0)
    writer_max_batch: int = 512
    # How often an instance re-reads keys and policies changed by another process.
    refresh_interval_seconds: float = 1.0
    # How often the sequencer looks for receipts to add to the Merkle logs.
    sequencer_interval_seconds: float = 0.25
    # Automatic signing-key rotation (docs/operations.md, "Signing keys"): each key signs
    # for the period; its successor is published the overlap before it takes over. On by
    # default (keys rotate periodically: docs/receipts.md); "off" disables it. Durations as
    # pydantic reads them: "90d", ISO 8601 "P90D" or "PT12H", or seconds in TOML.
    key_rotation_period: timedelta | None = timedelta(days=90)
    key_rotation_overlap: timedelta = timedelta(days=7)
    # Whether ``execauth serve`` applies pending migrations before serving. Replicas set
    # it false and a single ``execauth db upgrade`` job migrates (docs/deploy.md).
    migrate_on_start: bool = True
    # Proxies (IPs or CIDR networks, comma-separated, or "*") whose X-Forwarded-For and
    # X-Forwarded-Proto are believed. Empty: nobody's, so no client can claim to have
    # come over TLS or from another address (docs/deploy.md, "Behind a proxy").
    forwarded_allow_ips: str = ""
    # Decision streaming (docs/observability.md): every serving instance delivers the
    # subscriptions it holds the lease of. The NATS server JetStream subscriptions publish
    # to is the operator's choice, not an organization's: orgs name only the subject.
    streaming_enabled: bool = True
    nats_url: str | None = None
    stream_poll_interval_seconds: float = Field(default=0.2, gt=0)
    stream_max_attempts: int = Field(default=12, ge=1)
    # The approval expiry sweep (docs/approvals.md, "Notifications"): how often each serving
    # process settles approvals whose deadline passed, and how many unsettled escalations
    # one pass looks at. 0 turns the sweep off (expiry is then settled only when read).
    approval_sweep_interval_seconds: float = Field(default=10.0, ge=0)
    approval_sweep_batch: int = Field(default=100, ge=1, le=10_000)
    # Metric label budgets, per serving process (docs/observability.md, "Metrics"): past
    # this many organizations or surfaces, new ones are counted under "other", so a
    # tenant minting surfaces cannot create a time series each.
    metrics_max_orgs: int = Field(default=100, ge=1)
    metrics_max_surfaces: int = Field(default=200, ge=1)
    # Logs (docs/observability.md, "Logs"): process logs as JSON lines on stderr, or as
    # text when stderr is a terminal ("auto"); one line per execute request in the
    # decision log, to stderr, stdout, a file or nowhere ("off"). The request's own data
    # (actor, context, payload) enters the decision log only when asked: a privacy choice.
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    decision_log: str = Field(default="stderr", min_length=1)
    decision_log_context: bool = False
    # uvicorn's access log: off, as the decision log says more about each execute.
    access_log: bool = False

    @model_validator(mode="after")
    def _catalog_is_not_empty(self) -> Settings:
        if not self.plans:
            raise ValueError("the plan catalog is empty; configure at least one plan")
        return self

    @model_validator(mode="after")
    def _default_plan_is_in_the_catalog(self) -> Settings:
        if self.default_plan is None:
            self.default_plan = DEFAULT_PLAN if DEFAULT_PLAN in self.plans else None
        elif self.default_plan not in self.plans:
            raise ValueError(f"default_plan {self.default_plan!r} is not in the plan catalog")
        return self

    @model_validator(mode="after")
    def _issuer_follows_the_listener(self) -> Settings:
        if not self.issuer:
            self.issuer = listen_origin(self.host, self.port)
        return self

    @field_validator("log_format", "log_level", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        # EXECAUTH_LOG_LEVEL=INFO as readily as =info (Python's and uvicorn's spelling).
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("key_rotation_period", mode="before")
    @classmethod
    def _rotation_off(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() == "off" else value

    @model_validator(mode="after")
    def _rotation_overlap_fits(self) -> Settings:
        period, overlap = self.key_rotation_period, self.key_rotation_overlap
        if period is None:
            return self
        # A successor published less than a cache_ttl ahead could sign receipts that a
        # client's cached key list does not know yet.
        if overlap < timedelta(seconds=KEY_LIST_CACHE_TTL):
            raise ValueError(f"key_rotation_overlap must be at least {KEY_LIST_CACHE_TTL} s")
        if period <= overlap:
            raise ValueError("key_rotation_period must be longer than key_rotation_overlap")
        return self

    def rotation_schedule(self) -> RotationSchedule | None:
        """The automatic key rotation, or ``None`` when it is off."""
        if self.key_rotation_period is None:
            return None
        return RotationSchedule(self.key_rotation_period, self.key_rotation_overlap)

    def plan_catalog(self) -> dict[str, Plan]:
        return {
            name: Plan(name, spec.executes_per_month, spec.requests_per_minute)
            for name, spec in self.plans.items()
        }

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        # Mounted secrets (Docker and Kubernetes): a file per setting, named like its
        # variable (EXECAUTH_ADMIN_TOKEN, EXECAUTH_DATABASE_URL…), so no secret has to sit
        # in the environment or the TOML file (docs/deploy.md).
        secrets_dir = os.environ.get("EXECAUTH_SECRETS_DIR")
        if secrets_dir:
            sources.append(SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir))
        toml_path = os.environ.get("EXECAUTH_CONFIG_FILE")
        if toml_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    def resolved_secret_key(self) -> str:
        """The configured secret, or the one kept in ``secret_key_file`` (created if absent)."""
        if self.secret_key:
            return self.secret_key
        path = self.secret_key_file
        if path.exists():
            return path.read_text().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        value = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IRUSR | stat.S_IWUSR)
        with os.fdopen(fd, "w") as handle:
            handle.write(value + "\n")
        return value


def listen_origin(host: str, port: int) -> str:
    """``http://host:port`` for a listen address (an IPv6 literal in brackets, RFC 3986)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def load_settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


def serving_processes(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """One gateway process per core this process may run on: the CPUs it is allowed
    (affinity), capped by a cgroup v2 CPU quota (a container's ``--cpus`` or a pod's CPU
    limit), which ``os.cpu_count()`` ignores and which would otherwise start a worker
    for every core of the host."""
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    cores = allowed or os.cpu_count() or 1
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return max(1, min(cores, 64))
    if quota != "max" and int(period) > 0:
        cores = min(cores, max(1, -(-int(quota) // int(period))))  # rounded up
    return max(1, min(cores, 64))
