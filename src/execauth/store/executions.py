"""Stored executions: one row per evaluated request, holding the exact receipt bytes.

The records, the reads, and the repository's small writes (lineage, repeats). How the
receipt writer stores records (batches, idempotency keys, quotas) is in
``store/execution_writes.py``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, or_, select
from ulid import ULID

from execauth.store.audit import append_lineage
from execauth.store.database import as_columns, binder, execute_on_sqlite
from execauth.store.tables import (
    approvals,
    execution_events,
    execution_repeats,
    executions,
    usage_counters,
)
from execauth.tenancy.usage import UsageRow
from execauth.wire_time import epoch_millis, format_timestamp


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
    # Its Merkle leaf, SHA-256(0x00 || the bytes its signature covers), computed by the
    # signer and queued for the sequencer; None on a record read back from the store.
    leaf_hash: bytes | None = None

    def as_prior(self) -> PriorExecution:
        """What this record's idempotency key stands for, once it is stored."""
        return PriorExecution(self.execution_id, self.request_digest, self.decision, self.receipt)


@dataclass(frozen=True, slots=True)
class PriorExecution:
    """What an idempotency key already stands for."""

    execution_id: str
    request_digest: str
    decision: str
    receipt: bytes


@dataclass(frozen=True, slots=True)
class Repeat:
    """One idempotent repeat of an execution (same key, same request), to be counted."""

    org_id: str
    execution_id: str
    at: datetime


# What an idempotency key stands for: read by the writer for every key it must look up
# (store/execution_writes.py), as driver SQL for the reason given there.
_PRIOR_SQLITE = (
    "SELECT execution_id, request_digest, decision, receipt FROM executions"
    " WHERE org_id = ? AND idempotency_key = ?"
)
_PRIOR_POSTGRESQL = _PRIOR_SQLITE.replace("?", "%s")
# The same for many keys of one org at once: the keys travel as one parameter (a JSON
# array on SQLite, an array on PostgreSQL), so the text is the same whatever their
# number. Per org and with = ANY, not one join of every (org, key) pair: planned without
# statistics (a new table, autovacuum off), PostgreSQL may cache a plan that reads the
# org's rows through its (org_id, ...) index; = ANY reads them once per query, a join
# would read them once per key.
_PRIORS_SQLITE = (
    "SELECT idempotency_key, execution_id, request_digest, decision, receipt"
    " FROM executions WHERE org_id = ? AND idempotency_key IN (SELECT value FROM json_each(?))"
)
_PRIORS_POSTGRESQL = (
    "SELECT idempotency_key, execution_id, request_digest, decision, receipt"
    " FROM executions WHERE org_id = %s AND idempotency_key = ANY(%s::varchar[])"
)


def executes_in_period(conn: Connection, org_id: str, period: str) -> int:
    value = conn.execute(
        select(usage_counters.c.executes).where(
            usage_counters.c.org_id == org_id, usage_counters.c.period == period
        )
    ).scalar_one_or_none()
    return int(value or 0)


def prior_execution(conn: Connection, org_id: str, idempotency_key: str) -> PriorExecution | None:
    sql = _PRIOR_POSTGRESQL if conn.dialect.name == "postgresql" else _PRIOR_SQLITE
    row = conn.exec_driver_sql(sql, (org_id, idempotency_key)).first()
    return PriorExecution(row[0], row[1], row[2], bytes(row[3])) if row is not None else None


def prior_executions(
    conn: Connection, keys: Mapping[str, Collection[str]]
) -> dict[tuple[str, str], PriorExecution]:
    """What each of ``keys`` (org → its keys) stands for, one query per org, in ``conn``'s
    transaction; a key that stands for nothing is left out. On SQLite through ``sqlite3``
    itself, as the writer's other statements (``execute_on_sqlite``)."""
    found: dict[tuple[str, str], PriorExecution] = {}
    postgresql = conn.dialect.name == "postgresql"
    for org_id, wanted in keys.items():
        if postgresql:
            rows = conn.exec_driver_sql(_PRIORS_POSTGRESQL, (org_id, list(wanted))).all()
        else:
            parameters = (org_id, json.dumps(list(wanted)))
            rows = execute_on_sqlite(conn, _PRIORS_SQLITE, parameters).fetchall()
        for key, execution_id, digest, decision, receipt in rows:
            found[(org_id, key)] = PriorExecution(execution_id, digest, decision, bytes(receipt))
    return found


def count_repeats(conn: Connection, repeats: Sequence[Repeat]) -> None:
    """Count idempotent repeats (docs/decisions.md, "repeats").

    One upsert per distinct execution, of a fixed-size row: however often a client
    retries, an execution keeps one row of repeats (a count, the first and the last
    time), so retries cannot grow storage that the quota does not count. The writer
    calls this inside one of its batches' transactions (the one that found the repeats,
    or the next one, for repeats a gateway answered itself), so a retry storm adds no
    write transaction of its own to compete for the database's write lock.
    """
    merged: dict[str, dict[str, Any]] = {}
    for repeat in repeats:
        row = merged.get(repeat.execution_id)
        if row is None:
            merged[repeat.execution_id] = {
                "execution_id": repeat.execution_id,
                "org_id": repeat.org_id,
                "repeats": 1,
                "first_repeated_at": repeat.at,
                "last_repeated_at": repeat.at,
            }
        else:
            row["repeats"] += 1
            row["first_repeated_at"] = min(row["first_repeated_at"], repeat.at)
            row["last_repeated_at"] = max(row["last_repeated_at"], repeat.at)
    # Each value bound as its column's type binds it (a naive time is refused; SQLite
    # stores the text SQLAlchemy would).
    binders = [binder(execution_repeats.c[name], conn) for name in _REPEAT_COLUMNS]
    rows = [
        tuple(bind(row[name]) for name, bind in zip(_REPEAT_COLUMNS, binders, strict=True))
        for row in merged.values()
    ]
    if conn.dialect.name == "postgresql":
        # One statement over arrays: psycopg's executemany would send and wait row by row
        # (a retry storm repeats many executions per batch; docs/performance.md, "The
        # PostgreSQL sequencer round"). The rows are distinct executions (merged above),
        # so no row is updated twice by the one statement.
        conn.exec_driver_sql(_POSTGRESQL_COUNT_REPEATS, as_columns(rows))
        return
    # Handed to sqlite3 itself, as the writer's other statements (``execute_on_sqlite``):
    # SQLAlchemy's compiled upsert cost 230 µs a batch of four repeats against 32
    # (docs/performance.md, "The time-ordered receipt id round").
    execute_on_sqlite(conn, _SQLITE_COUNT_REPEATS, rows, many=True)


_REPEAT_COLUMNS = ("execution_id", "org_id", "repeats", "first_repeated_at", "last_repeated_at")


def _count_repeats_sql(rows: str, earliest: str, latest: str) -> str:
    """The upsert of the repeats' counts, from ``rows`` in ``_REPEAT_COLUMNS`` order (the
    order ``count_repeats`` binds them in). A batch committed late may hold earlier
    repeats: the times only widen (``earliest``, ``latest``: each dialect's min and max
    of two values)."""
    return (
        f"INSERT INTO execution_repeats ({', '.join(_REPEAT_COLUMNS)}) {rows}"
        " ON CONFLICT (execution_id) DO UPDATE SET"
        " repeats = execution_repeats.repeats + excluded.repeats,"
        f" first_repeated_at = {earliest}(execution_repeats.first_repeated_at,"
        " excluded.first_repeated_at),"
        f" last_repeated_at = {latest}(execution_repeats.last_repeated_at,"
        " excluded.last_repeated_at)"
    )


_SQLITE_COUNT_REPEATS = _count_repeats_sql("VALUES (?, ?, ?, ?, ?)", "min", "max")
# The arrays in binary (%b), as the writer's other statements on PostgreSQL.
_POSTGRESQL_COUNT_REPEATS = _count_repeats_sql(
    "SELECT * FROM unnest(%b::varchar[], %b::varchar[], %b::bigint[],"
    " %b::timestamptz[], %b::timestamptz[])",
    "least",
    "greatest",
)


class ExecutionStore:
    """Reads of stored executions (writes go through ``serving.receipt_writer.ReceiptWriter``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def by_idempotency_keys(
        self, keys: Mapping[str, Collection[str]]
    ) -> dict[tuple[str, str], PriorExecution]:
        """``prior_executions`` on a connection of its own."""
        with self.engine.connect() as conn:
            return prior_executions(conn, keys)

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
        """Executes decided in [start, end) grouped by org, surface and decision.

        The outcome receipt of an approval is not an execute of its own: the request
        counted once, as its ESCALATE (docs/approvals.md).
        """
        outcomes = select(approvals.c.outcome_execution_id).where(
            approvals.c.outcome_execution_id.is_not(None)
        )
        query = (
            select(executions.c.org_id, executions.c.surface, executions.c.decision, func.count())
            .where(executions.c.decided_at_ms >= epoch_millis(start))
            .where(executions.c.decided_at_ms < epoch_millis(end))
            .where(executions.c.execution_id.not_in(outcomes))
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
            query = query.where(executions.c.decided_at_ms >= epoch_millis(filters.since))
        if filters.until is not None:
            query = query.where(executions.c.decided_at_ms < epoch_millis(filters.until))
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
        repeats_query = select(execution_repeats).where(
            execution_repeats.c.org_id == org_id,
            execution_repeats.c.execution_id == execution_id,
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
            repeated = conn.execute(repeats_query).mappings().first()
        events = [
            LineageEvent(row["kind"], row["occurred_at"], json.loads(row["details"]))
            for row in rows
            # Repeats stored one row each before migration 0006 are in the count below.
            if row["kind"] != REPEAT_KIND
        ]
        if repeated is not None:
            events.append(
                LineageEvent(
                    REPEAT_KIND,
                    repeated["last_repeated_at"],
                    {
                        "repeats": repeated["repeats"],
                        "first_repeated_at": format_timestamp(repeated["first_repeated_at"]),
                    },
                )
            )
            events.sort(key=operator.attrgetter("occurred_at"))
        return events


@dataclass(frozen=True, slots=True)
class ExecutionFilters:
    surface: str | None = None
    decision: str | None = None
    actor: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: tuple[int, str] | None = None  # the cursor: (decided_at_ms, execution_id)


REPEAT_KIND = "idempotent_repeat"


@dataclass(frozen=True, slots=True)
class LineageEvent:
    kind: str  # "idempotent_repeat" (one, with the count), "replay", ...
    occurred_at: datetime
    details: dict[str, Any]


def _record(row: Any) -> ExecutionRecord:
    return ExecutionRecord(
        **{
            field: row[field]
            for field in ExecutionRecord.__dataclass_fields__
            if field not in ("receipt", "leaf_hash")
        },
        receipt=bytes(row["receipt"]),
    )
