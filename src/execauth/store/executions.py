"""Stored executions: one row per evaluated request, holding the exact receipt bytes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, bindparam, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from ulid import ULID

from execauth.store.audit import append_lineage
from execauth.store.tables import execution_events, executions, usage_counters
from execauth.tenancy.quota import QuotaCheck
from execauth.tenancy.usage import UsageRow


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

    execution_id: str
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


def insert_batch(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> list[WriteOutcome]:
    """``insert_execution`` for a whole batch, in a handful of statements.

    Same outcomes, in order: a repeat of an idempotency key (stored earlier or
    earlier in this batch) gets the prior execution; the quota is granted in
    batch order up to the plan's limit, exactly; the rest are inserted with one
    executemany. Any error (e.g. another instance inserting the same key in the
    meantime) aborts the transaction, and the writer redoes the batch one record
    at a time with ``insert_execution``.
    """
    outcomes: list[WriteOutcome] = [None] * len(items)
    first_in_batch: dict[tuple[str, str], int] = {}
    repeats_in_batch: dict[int, int] = {}  # position -> position of the record it repeats
    priors = _priors(conn, items)
    fresh: list[int] = []
    for position, (record, _) in enumerate(items):
        key = record.idempotency_key
        if key is not None:
            prior = priors.get((record.org_id, key))
            if prior is not None:
                outcomes[position] = prior
                continue
            if (record.org_id, key) in first_in_batch:
                repeats_in_batch[position] = first_in_batch[(record.org_id, key)]
                continue
            first_in_batch[(record.org_id, key)] = position
        fresh.append(position)

    counted: dict[tuple[str, str], list[int]] = {}
    for position in fresh:
        record, quota = items[position]
        if quota is not None:
            counted.setdefault((record.org_id, quota.period), []).append(position)
    refused = set()
    for (org_id, _), positions in counted.items():
        quota = items[positions[0]][1]
        assert quota is not None
        granted = _consume_quota_many(conn, org_id, quota, len(positions))
        for position in positions[granted:]:
            outcomes[position] = QUOTA_EXHAUSTED
            refused.add(position)
    for position, source in repeats_in_batch.items():
        # A repeat shares the fate of the record it repeats: stored, or refused.
        outcomes[position] = QUOTA_EXHAUSTED if source in refused else _as_prior(items[source][0])

    rows = [
        {field: getattr(items[p][0], field) for field in ExecutionRecord.__dataclass_fields__}
        for p in fresh
        if p not in refused
    ]
    if rows:
        conn.execute(executions.insert(), rows)
    return outcomes


def _priors(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> dict[tuple[str, str], PriorExecution]:
    keys: dict[str, set[str]] = {}
    for record, _ in items:
        if record.idempotency_key is not None:
            keys.setdefault(record.org_id, set()).add(record.idempotency_key)
    found: dict[tuple[str, str], PriorExecution] = {}
    for org_id, wanted in keys.items():
        rows = conn.execute(
            select(
                executions.c.idempotency_key,
                executions.c.execution_id,
                executions.c.request_digest,
                executions.c.decision,
                executions.c.receipt,
            ).where(executions.c.org_id == org_id, executions.c.idempotency_key.in_(wanted))
        )
        for key, execution_id, digest, decision, receipt in rows:
            found[(org_id, key)] = PriorExecution(execution_id, digest, decision, bytes(receipt))
    return found


def _as_prior(record: ExecutionRecord) -> PriorExecution:
    return PriorExecution(
        record.execution_id, record.request_digest, record.decision, record.receipt
    )


def _consume_quota_many(conn: Connection, org_id: str, quota: QuotaCheck, wanted: int) -> int:
    """Count up to ``wanted`` executes; return how many the limit allowed (in order).

    The counter row is written first (taking SQLite's write lock, or the row lock
    on PostgreSQL with FOR UPDATE) before it is read, so the grant is exact.
    """
    counter = {"counter_org": org_id, "counter_period": quota.period}
    conn.execute(_ENSURE_COUNTER[_dialect_name(conn)], counter)
    current_query = _CURRENT_COUNT_FOR_UPDATE if _is_postgres(conn) else _CURRENT_COUNT
    current = int(conn.execute(current_query, counter).scalar_one())
    granted = wanted if quota.limit is None else max(0, min(wanted, quota.limit - current))
    if granted:
        conn.execute(_ADD_TO_COUNT, counter | {"counter_delta": granted})
    return granted


def _dialect(conn: Connection) -> Any:
    return postgresql if conn.dialect.name == "postgresql" else sqlite


def _dialect_name(conn: Connection) -> str:
    return "postgresql" if conn.dialect.name == "postgresql" else "sqlite"


def _is_postgres(conn: Connection) -> bool:
    return bool(conn.dialect.name == "postgresql")


# The quota statements run in every writer batch: built once, so that each
# execution is a compiled-cache hit instead of a new statement tree to build and key.
_COUNTER_ROW = (usage_counters.c.org_id == bindparam("counter_org")) & (
    usage_counters.c.period == bindparam("counter_period")
)
_ENSURE_COUNTER = {
    name: dialect.insert(usage_counters)
    .values(org_id=bindparam("counter_org"), period=bindparam("counter_period"), executes=0)
    .on_conflict_do_nothing(index_elements=["org_id", "period"])
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_CURRENT_COUNT = select(usage_counters.c.executes).where(_COUNTER_ROW)
_CURRENT_COUNT_FOR_UPDATE = _CURRENT_COUNT.with_for_update()
_ADD_TO_COUNT = (
    update(usage_counters)
    .where(_COUNTER_ROW)
    .values(executes=usage_counters.c.executes + bindparam("counter_delta"))
)
# The conditional UPDATE takes the row's lock: concurrent writers serialize on it.
_COUNT_ONE_BELOW_LIMIT = (
    update(usage_counters)
    .where(_COUNTER_ROW, usage_counters.c.executes < bindparam("counter_limit"))
    .values(executes=usage_counters.c.executes + 1)
    .returning(usage_counters.c.executes)
)


def _consume_quota(conn: Connection, org_id: str, quota: QuotaCheck) -> bool:
    """Count one execute; ``False`` (nothing counted) when the limit is reached.

    The conditional UPDATE takes the counter row's lock, so concurrent writers
    (threads, processes, instances on one PostgreSQL) are serialized on it and
    the limit is exact.
    """
    counter = {"counter_org": org_id, "counter_period": quota.period}
    conn.execute(_ENSURE_COUNTER[_dialect_name(conn)], counter)
    if quota.limit is None:
        conn.execute(_ADD_TO_COUNT, counter | {"counter_delta": 1})
        return True
    below = counter | {"counter_limit": quota.limit}
    return conn.execute(_COUNT_ONE_BELOW_LIMIT, below).first() is not None


def _refund_quota(conn: Connection, org_id: str, quota: QuotaCheck) -> None:
    counter = {"counter_org": org_id, "counter_period": quota.period}
    conn.execute(_ADD_TO_COUNT, counter | {"counter_delta": -1})


def executes_in_period(conn: Connection, org_id: str, period: str) -> int:
    value = conn.execute(
        select(usage_counters.c.executes).where(
            usage_counters.c.org_id == org_id, usage_counters.c.period == period
        )
    ).scalar_one_or_none()
    return int(value or 0)


def prior_execution(conn: Connection, org_id: str, idempotency_key: str) -> PriorExecution | None:
    row = conn.execute(
        select(
            executions.c.execution_id,
            executions.c.request_digest,
            executions.c.decision,
            executions.c.receipt,
        ).where(executions.c.org_id == org_id, executions.c.idempotency_key == idempotency_key)
    ).first()
    return PriorExecution(row[0], row[1], row[2], bytes(row[3])) if row is not None else None


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

    def record_lineage(
        self, org_id: str, execution_id: str, kind: str, now: datetime, details: dict[str, Any]
    ) -> None:
        with self.engine.begin() as conn:
            append_lineage(
                conn,
                event_id="lin_" + str(ULID()).lower(),
                execution_id=execution_id,
                org_id=org_id,
                occurred_at=now,
                kind=kind,
                details=details,
            )

    def usage_rows(self, org_id: str | None, start: datetime, end: datetime) -> list[UsageRow]:
        """Executes decided in [start, end) grouped by org, surface and decision."""
        query = (
            select(executions.c.org_id, executions.c.surface, executions.c.decision, func.count())
            .where(executions.c.decided_at_ms >= _ms(start), executions.c.decided_at_ms < _ms(end))
            .group_by(executions.c.org_id, executions.c.surface, executions.c.decision)
        )
        if org_id is not None:
            query = query.where(executions.c.org_id == org_id)
        with self.engine.connect() as conn:
            return [UsageRow(*row) for row in conn.execute(query).all()]

    def page(self, org_id: str, filters: ExecutionFilters, *, limit: int) -> list[ExecutionRecord]:
        """Newest first, keyset-paginated on (decided_at_ms, execution_id).

        A keyset cursor, unlike an offset, neither repeats nor skips rows when new
        executions arrive between two pages: they sort before the first page.
        """
        query = select(executions).where(executions.c.org_id == org_id)
        if filters.surface is not None:
            query = query.where(executions.c.surface == filters.surface)
        if filters.decision is not None:
            query = query.where(executions.c.decision == filters.decision)
        if filters.actor is not None:
            query = query.where(executions.c.actor == filters.actor)
        if filters.since is not None:
            query = query.where(executions.c.decided_at_ms >= _ms(filters.since))
        if filters.until is not None:
            query = query.where(executions.c.decided_at_ms < _ms(filters.until))
        if filters.before is not None:
            at_ms, execution_id = filters.before
            query = query.where(
                or_(
                    executions.c.decided_at_ms < at_ms,
                    and_(
                        executions.c.decided_at_ms == at_ms,
                        executions.c.execution_id < execution_id,
                    ),
                )
            )
        query = query.order_by(
            executions.c.decided_at_ms.desc(), executions.c.execution_id.desc()
        ).limit(limit)
        with self.engine.connect() as conn:
            return [_record(row) for row in conn.execute(query).mappings().all()]

    def execution_of_receipt(self, org_id: str, receipt_id: str) -> str | None:
        query = select(executions.c.execution_id).where(
            executions.c.org_id == org_id, executions.c.receipt_id == receipt_id
        )
        with self.engine.connect() as conn:
            value: str | None = conn.execute(query).scalar_one_or_none()
        return value

    def get(self, org_id: str, execution_id: str) -> ExecutionRecord | None:
        query = select(executions).where(
            executions.c.org_id == org_id, executions.c.execution_id == execution_id
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return _record(row) if row is not None else None

    def lineage(self, org_id: str, execution_id: str) -> list[LineageEvent]:
        query = (
            select(execution_events)
            .where(
                execution_events.c.org_id == org_id,
                execution_events.c.execution_id == execution_id,
            )
            .order_by(execution_events.c.occurred_at, execution_events.c.event_id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            LineageEvent(row["kind"], row["occurred_at"], json.loads(row["details"]))
            for row in rows
        ]


@dataclass(frozen=True, slots=True)
class ExecutionFilters:
    surface: str | None = None
    decision: str | None = None
    actor: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: tuple[int, str] | None = None  # the cursor: (decided_at_ms, execution_id)


@dataclass(frozen=True, slots=True)
class LineageEvent:
    kind: str  # "idempotent_repeat", "replay", ...
    occurred_at: datetime
    details: dict[str, Any]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _record(row: Any) -> ExecutionRecord:
    return ExecutionRecord(
        **{
            field: row[field]
            for field in ExecutionRecord.__dataclass_fields__
            if field != "receipt"
        },
        receipt=bytes(row["receipt"]),
    )
