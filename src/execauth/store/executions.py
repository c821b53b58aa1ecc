"""Stored executions: one row per evaluated request, holding the exact receipt bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from execauth.store.tables import executions, usage_counters
from execauth.tenancy.quota import QuotaCheck


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """Everything needed to answer a repeat, replay the decision and audit it."""

    execution_id: str
    receipt_id: str
    org_id: str
    idempotency_key: str | None
    request_digest: str
    surface: str
    actor: str | None
    decision: str
    policy_id: str
    policy_version: int
    rule_id: str | None
    reason: str | None
    decided_at_ms: int
    evaluation_input: str  # JSON
    receipt: bytes  # the response body, byte for byte


@dataclass(frozen=True, slots=True)
class PriorExecution:
    """What an idempotency key already stands for."""

    request_digest: str
    decision: str
    receipt: bytes


class QuotaExhausted:
    """The record was not stored: its organization's quota for the period is used up."""


QUOTA_EXHAUSTED = QuotaExhausted()
WriteOutcome = PriorExecution | QuotaExhausted | None


def insert_execution(
    conn: Connection, record: ExecutionRecord, quota: QuotaCheck | None = None
) -> WriteOutcome:
    """Store ``record`` and count it against ``quota``, in the caller's transaction.

    Returns ``None`` when stored, the prior execution when the idempotency key is
    taken (a repeat, not counted), or ``QUOTA_EXHAUSTED`` (nothing stored).
    """
    if record.idempotency_key is not None:
        prior = prior_execution(conn, record.org_id, record.idempotency_key)
        if prior is not None:
            return prior
    if quota is not None and not _consume_quota(conn, record.org_id, quota):
        return QUOTA_EXHAUSTED
    values = {field: getattr(record, field) for field in ExecutionRecord.__dataclass_fields__}
    if record.idempotency_key is None:
        conn.execute(executions.insert().values(**values))
        return None
    dialect = _dialect(conn)
    statement = (
        dialect.insert(executions)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["org_id", "idempotency_key"])
        .returning(executions.c.execution_id)
    )
    # RETURNING rather than rowcount: psycopg reports -1 for INSERT … ON CONFLICT here.
    if conn.execute(statement).first() is not None:
        return None
    # Another instance stored the same key between our check and our insert.
    if quota is not None:
        _refund_quota(conn, record.org_id, quota)
    prior = prior_execution(conn, record.org_id, record.idempotency_key)
    assert prior is not None  # the conflict proves the row exists
    return prior


def _dialect(conn: Connection) -> Any:
    return postgresql if conn.dialect.name == "postgresql" else sqlite


def _consume_quota(conn: Connection, org_id: str, quota: QuotaCheck) -> bool:
    """Count one execute; ``False`` (nothing counted) when the limit is reached.

    The conditional UPDATE takes the counter row's lock, so concurrent writers
    (threads, processes, instances on one PostgreSQL) are serialized on it and
    the limit is exact.
    """
    conn.execute(
        _dialect(conn)
        .insert(usage_counters)
        .values(org_id=org_id, period=quota.period, executes=0)
        .on_conflict_do_nothing(index_elements=["org_id", "period"])
    )
    statement = (
        update(usage_counters)
        .where(usage_counters.c.org_id == org_id, usage_counters.c.period == quota.period)
        .values(executes=usage_counters.c.executes + 1)
        .returning(usage_counters.c.executes)
    )
    if quota.limit is not None:
        statement = statement.where(usage_counters.c.executes < quota.limit)
    return conn.execute(statement).first() is not None


def _refund_quota(conn: Connection, org_id: str, quota: QuotaCheck) -> None:
    conn.execute(
        update(usage_counters)
        .where(usage_counters.c.org_id == org_id, usage_counters.c.period == quota.period)
        .values(executes=usage_counters.c.executes - 1)
    )


def executes_in_period(conn: Connection, org_id: str, period: str) -> int:
    value = conn.execute(
        select(usage_counters.c.executes).where(
            usage_counters.c.org_id == org_id, usage_counters.c.period == period
        )
    ).scalar_one_or_none()
    return int(value or 0)


def prior_execution(conn: Connection, org_id: str, idempotency_key: str) -> PriorExecution | None:
    row = conn.execute(
        select(executions.c.request_digest, executions.c.decision, executions.c.receipt).where(
            executions.c.org_id == org_id, executions.c.idempotency_key == idempotency_key
        )
    ).first()
    return PriorExecution(row[0], row[1], bytes(row[2])) if row is not None else None


class ExecutionStore:
    """Reads of stored executions (writes go through ``store.writer.ReceiptWriter``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def by_idempotency_key(self, org_id: str, idempotency_key: str) -> PriorExecution | None:
        with self.engine.connect() as conn:
            return prior_execution(conn, org_id, idempotency_key)

    def receipt_bytes(self, org_id: str, execution_id: str) -> bytes | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(executions.c.receipt).where(
                    executions.c.org_id == org_id, executions.c.execution_id == execution_id
                )
            ).scalar_one_or_none()
        return bytes(value) if value is not None else None

    def executes_in_period(self, org_id: str, period: str) -> int:
        with self.engine.connect() as conn:
            return executes_in_period(conn, org_id, period)

    def count(self, org_id: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(executions).where(executions.c.org_id == org_id)
            ).scalar_one()
