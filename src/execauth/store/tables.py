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
    text,
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
    # After a rotation the old secret keeps working until previous_valid_until.
    Column("previous_secret_hash", String(64), nullable=True, index=True),
    Column("previous_valid_until", UTCDateTime, nullable=True),
    Column("rotated_at", UTCDateTime, nullable=True),
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
    # History, usage and export by time (migration 0011 dropped its prefix, org_time).
    Index("ix_executions_org_decided", "org_id", "decided_at_ms", "execution_id"),
    # The expiry sweep's walk over escalations (migration 0010, execauth.usecases.approval_sweep).
    Index(
        "ix_executions_escalations",
        "decided_at_ms",
        "execution_id",
        sqlite_where=text("decision = 'ESCALATE'"),
        postgresql_where=text("decision = 'ESCALATE'"),
    ),
)

usage_counters = Table(
    "usage_counters",
    metadata,
    Column("org_id", String(64), ForeignKey("orgs.org_id"), primary_key=True),
    Column("period", String(7), primary_key=True),  # calendar month, UTC: "2026-11"
    Column("executes", Integer, nullable=False),
)

# Append-only (database triggers refuse UPDATE and DELETE; migration 0003).
audit_events = Table(
    "audit_events",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("org_id", String(64), nullable=True),  # NULL: a service-wide action
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("details", Text, nullable=False),  # JSON object
    Index("ix_audit_events_org_time", "org_id", "occurred_at"),
)

execution_events = Table(
    "execution_events",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("execution_id", String(64), nullable=False),
    Column("org_id", String(64), nullable=False),
    Column("occurred_at", UTCDateTime, nullable=False),
    Column("kind", String(32), nullable=False),  # idempotent_repeat, replay, ...
    Column("details", Text, nullable=False),  # JSON object
    Index("ix_execution_events_execution", "execution_id", "occurred_at"),
)

# Idempotent repeats of an execution (migration 0006): a count and the first and last
# time, so that retries cannot grow storage beyond one row per execution.
execution_repeats = Table(
    "execution_repeats",
    metadata,
    Column("execution_id", String(64), primary_key=True),
    Column("org_id", String(64), nullable=False),
    Column("repeats", BigInteger, nullable=False),
    Column("first_repeated_at", UTCDateTime, nullable=False),
    Column("last_repeated_at", UTCDateTime, nullable=False),
)

# The per-organization Merkle log (RFC 9162), append-only (migration 0004).
log_leaves = Table(
    "log_leaves",
    metadata,
    Column("org_id", String(64), primary_key=True),
    Column("log_index", BigInteger, primary_key=True),
    Column("execution_id", String(64), nullable=False, unique=True),
    Column("leaf_hash", LargeBinary, nullable=False),  # SHA-256(0x00 || signed payload)
    Column("sequenced_at", UTCDateTime, nullable=False),
)

# The receipts stored and not yet in their log (migration 0012): queued in the transaction
# that inserts each (store/execution_writes.py), deleted in the one that places it. A
# receipt's place in its log is its log_leaves row; its executions row is never rewritten.
log_pending = Table(
    "log_pending",
    metadata,
    Column("decided_at_ms", BigInteger, primary_key=True),
    Column("execution_id", String(64), primary_key=True),
    Column("org_id", String(64), nullable=False),
    # SHA-256(0x00 || signed payload), from the gateway that signed it; NULL for a
    # receipt queued before migration 0013 (the sequencer then computes it).
    Column("leaf_hash", LargeBinary, nullable=True),
    sqlite_with_rowid=False,
)

# Roots of complete, aligned subtrees of 2**level leaves: [node_index * 2**level, …).
log_nodes = Table(
    "log_nodes",
    metadata,
    Column("org_id", String(64), primary_key=True),
    Column("level", Integer, primary_key=True),
    Column("node_index", BigInteger, primary_key=True),
    Column("hash", LargeBinary, nullable=False),
)

log_checkpoints = Table(
    "log_checkpoints",
    metadata,
    Column("org_id", String(64), primary_key=True),
    Column("tree_size", BigInteger, primary_key=True),
    Column("root_hash", LargeBinary, nullable=False),
    Column("note", Text, nullable=False),  # C2SP signed note (tlog-checkpoint)
    Column("created_at", UTCDateTime, nullable=False),
)

# Live console sessions (migration 0005): the cookie carries a random session id, this
# row its SHA-256. A session is bound to the secret that signed in (its api_keys hash).
web_sessions = Table(
    "web_sessions",
    metadata,
    Column("session_hash", String(64), primary_key=True),
    Column("key_id", String(64), ForeignKey("api_keys.key_id"), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
)

# Decision streaming (migration 0007): where each subscription delivers an org's decisions
# and how far it has got in the org's log. ``next_index`` only moves after the sink
# acknowledged everything before it, so delivery is at least once and in log order.
subscriptions = Table(
    "subscriptions",
    metadata,
    Column("subscription_id", String(64), primary_key=True),
    Column("org_id", String(64), ForeignKey("orgs.org_id"), nullable=False),
    Column("name", String(128), nullable=False),
    Column("sink", String(16), nullable=False),  # webhook | nats
    Column("target", Text, nullable=False),  # the URL, or "nats://host:port/subject"
    Column("sealed_secret", LargeBinary, nullable=True),  # webhook signing secret, AES-GCM
    Column("state", String(16), nullable=False),  # active | dead_letter | paused
    Column("next_index", BigInteger, nullable=False),
    Column("delivered", BigInteger, nullable=False),
    Column("attempts", Integer, nullable=False),  # failed attempts since the last success
    Column("last_error", Text, nullable=True),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("lease_owner", String(64), nullable=True),  # the instance delivering it now
    Column("lease_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("delivered_at", UTCDateTime, nullable=True),
    # JSON list of event types delivered (migration 0010); NULL: every event.
    Column("event_types", Text, nullable=True),
    Index("ix_subscriptions_org_id", "org_id"),
)

# Human approval of ESCALATE decisions (docs/approvals.md). The row is created at the first
# vote or expiry, locked for every change after it; its outcome receipt is an execution.
approvals = Table(
    "approvals",
    metadata,
    Column("approval_id", String(64), primary_key=True),
    Column("org_id", String(64), nullable=False),
    Column("execution_id", String(64), nullable=False, unique=True),  # the ESCALATE
    Column("state", String(16), nullable=False),  # pending | approved | rejected | expired
    Column("created_at", UTCDateTime, nullable=False),
    Column("decided_at", UTCDateTime, nullable=True),
    Column("outcome_execution_id", String(64), nullable=True),  # the final receipt's execution
    Index("ix_approvals_org_state", "org_id", "state"),
)

approval_votes = Table(
    "approval_votes",
    metadata,
    Column("approval_id", String(64), primary_key=True),
    Column("approver_key_id", String(64), primary_key=True),  # each key counts once
    Column("org_id", String(64), nullable=False),
    Column("vote", String(8), nullable=False),  # approve | reject
    Column("actor", String(256), nullable=True),  # the person, as the approver named them
    Column("reason", Text, nullable=False),
    Column("voted_at", UTCDateTime, nullable=False),
)
