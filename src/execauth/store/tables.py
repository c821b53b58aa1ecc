"""SQLAlchemy Core tables. Changes go through an Alembic migration (store/migrations)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

service_settings = Table(
    "service_settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

orgs = Table(
    "orgs",
    metadata,
    Column("org_id", String(64), primary_key=True),
    Column("name", String(256), nullable=False),
    Column("plan", String(64), nullable=False),
    Column("wire_profile", String(1), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("disabled_at", UTCDateTime, nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("org_id", String(64), ForeignKey("orgs.org_id"), nullable=False, index=True),
    Column("name", String(256), nullable=False),
    Column("role", String(16), nullable=False),
    Column("surfaces", Text, nullable=False),  # JSON list of patterns; [] means every surface
    Column("secret_hash", String(64), nullable=False, unique=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=True),
    Column("revoked_at", UTCDateTime, nullable=True),
    Column("last_used_at", UTCDateTime, nullable=True),
)

policies = Table(
    "policies",
    metadata,
    Column("org_id", String(64), ForeignKey("orgs.org_id"), primary_key=True),
    Column("policy_id", String(64), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("document", Text, nullable=False),  # JSON: what policy_hash covers
    Column("source", Text, nullable=False),  # as published (YAML or JSON), for humans
    Column("policy_hash", String(71), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

signing_keys = Table(
    "signing_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("public_key", LargeBinary, nullable=False),
    Column("sealed_private_key", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("retired_at", UTCDateTime, nullable=True),
    Column("revoked_at", UTCDateTime, nullable=True),
)

executions = Table(
    "executions",
    metadata,
    Column("execution_id", String(64), primary_key=True),
    Column("receipt_id", String(64), nullable=False, unique=True),
    Column("org_id", String(64), ForeignKey("orgs.org_id"), nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("request_digest", String(71), nullable=False),
    Column("surface", String(128), nullable=False),
    Column("actor", String(256), nullable=True),
    Column("decision", String(8), nullable=False),
    Column("policy_id", String(64), nullable=False),
    Column("policy_version", Integer, nullable=False),
    Column("rule_id", String(64), nullable=True),
    Column("reason", String(96), nullable=True),
    Column("decided_at_ms", BigInteger, nullable=False),
    Column("evaluation_input", Text, nullable=False),  # JSON: request + org facts, for replay
    Column("receipt", LargeBinary, nullable=False),  # the exact response bytes
    UniqueConstraint("org_id", "idempotency_key"),
    Index("ix_executions_org_time", "org_id", "decided_at_ms"),
)

usage_counters = Table(
    "usage_counters",
    metadata,
    Column("org_id", String(64), ForeignKey("orgs.org_id"), primary_key=True),
    Column("period", String(7), primary_key=True),  # calendar month, UTC: "2026-11"
    Column("executes", Integer, nullable=False),
)
