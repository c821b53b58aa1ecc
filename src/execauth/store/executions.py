"""Stored executions: one row per evaluated request, holding the exact receipt bytes."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.dialects import postgresql, sqlite

from execauth.store.tables import executions


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


def insert_execution(conn: Connection, record: ExecutionRecord) -> PriorExecution | None:
    """Insert ``record`` unless its idempotency key is taken; then return what holds the key."""
    values = {field: getattr(record, field) for field in ExecutionRecord.__dataclass_fields__}
    if record.idempotency_key is None:
        conn.execute(executions.insert().values(**values))
        return None
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = (
        dialect.insert(executions)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["org_id", "idempotency_key"])
        .returning(executions.c.execution_id)
    )
    # RETURNING rather than rowcount: psycopg reports -1 for INSERT … ON CONFLICT here.
    if conn.execute(statement).first() is not None:
        return None
    prior = prior_execution(conn, record.org_id, record.idempotency_key)
    assert prior is not None  # the conflict proves the row exists
    return prior


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

    def count(self, org_id: str) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(executions).where(executions.c.org_id == org_id)
            ).scalar_one()
