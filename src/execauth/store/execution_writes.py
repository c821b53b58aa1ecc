"""How the receipt writer stores executions: batches, idempotency keys, quotas, repeats.

Only the writer (``serving/receipt_writer.py``) and the approval settlement
(``store/approvals.py``) call these, inside a transaction of their own; the records and
the reads are in ``store/executions.py``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError

from execauth.store.database import as_columns, execute_on_sqlite, in_format_style
from execauth.store.executions import (
    ExecutionRecord,
    PriorExecution,
    prior_execution,
    prior_executions,
)
from execauth.store.tables import executions
from execauth.tenancy.quota import QuotaCheck


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
    sql = _statements(conn)
    key = record.idempotency_key
    if key is None:
        if quota is not None and not _grant(conn, sql, record.org_id, quota, 1):
            return QUOTA_EXHAUSTED
        _store(conn, sql, [record])
        return None
    # On PostgreSQL, insert first and let the unique index tell a repeat (see
    # _insert_batch_keys_first), unless the quota cannot simply take one more: then a
    # repeat must be found first, so that it is not refused.
    if sql is _POSTGRESQL and (quota is None or _count_whole(conn, record.org_id, quota, 1)):
        return _insert_new_key(conn, sql, record, quota)
    prior = prior_execution(conn, record.org_id, key)
    if prior is not None:
        return prior
    if quota is not None and not _grant(conn, sql, record.org_id, quota, 1):
        return QUOTA_EXHAUSTED
    return _insert_new_key(conn, sql, record, quota)


def _insert_new_key(
    conn: Connection, sql: _Statements, record: ExecutionRecord, counted: QuotaCheck | None
) -> WriteOutcome:
    """Insert a record already counted against ``counted``; if its key is taken after
    all (another instance stored it meanwhile), give the count back: a repeat."""
    assert record.idempotency_key is not None
    # RETURNING rather than rowcount: psycopg reports -1 for INSERT … ON CONFLICT here.
    if _rows(conn, sql, sql.insert_new_key, _row(record)):
        _queue_for_log(conn, sql, [record])
        return None
    if counted is not None:
        _run(conn, sql, sql.add_to_count, (-1, record.org_id, counted.period))
    prior = prior_execution(conn, record.org_id, record.idempotency_key)
    assert prior is not None  # the conflict proves the row exists
    return prior


# The unique index that keeps receipt ids unique (migrations/versions/0001_initial_schema.py).
RECEIPT_ID_UNIQUE = "uq_executions_receipt_id"


def receipt_id_taken(error: BaseException) -> bool:
    """Whether ``error`` is the database refusing a receipt id another receipt holds
    (``errors.ReceiptIdTaken``: the receipt is signed again under a new id)."""
    if not isinstance(error, IntegrityError):
        return False
    diagnostics = getattr(error.orig, "diag", None)  # psycopg names the constraint
    if diagnostics is not None:
        return bool(diagnostics.constraint_name == RECEIPT_ID_UNIQUE)
    # sqlite3 names the column instead.
    return str(error.orig) == f"UNIQUE constraint failed: {executions.name}.receipt_id"


def receipt_id_is_free(conn: Connection, receipt_id: str) -> bool:
    """No stored receipt has ``receipt_id``, as the caller's transaction sees it."""
    taken = select(executions.c.receipt_id).where(executions.c.receipt_id == receipt_id)
    return conn.execute(taken).first() is None


def insert_batch(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> list[WriteOutcome]:
    """``insert_execution`` for a whole batch, in a handful of statements.

    Same outcomes, in order: a repeat of an idempotency key (stored earlier or
    earlier in this batch) gets the prior execution; the quota is granted in
    batch order up to the plan's limit, exactly; the rest are inserted at once.
    Any error (e.g. another instance inserting a key between the lookup and the
    insert, on the lookup-first path) aborts the transaction, and the writer redoes
    the batch one record at a time with ``insert_execution``.
    """
    sql = _statements(conn)
    if sql is _POSTGRESQL:
        outcomes = _insert_batch_keys_first(conn, items)
        if outcomes is not None:
            return outcomes
    return _insert_batch_priors_first(conn, sql, items)


def _first_occurrences(
    items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]],
) -> tuple[list[int], dict[int, int]]:
    """The positions to store, and each in-batch repeat -> the position it repeats."""
    first_in_batch: dict[tuple[str, str], int] = {}
    repeats: dict[int, int] = {}
    fresh: list[int] = []
    for position, (record, _) in enumerate(items):
        key = record.idempotency_key
        if key is not None:
            source = first_in_batch.setdefault((record.org_id, key), position)
            if source != position:
                repeats[position] = source
                continue
        fresh.append(position)
    return fresh, repeats


def _metered(
    items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]], positions: Sequence[int]
) -> list[tuple[tuple[str, str], QuotaCheck, list[int]]]:
    """``positions`` by (org, period) of their quota, in the one order every writer
    locks counter rows in, so that two instances' batches never wait for each
    other's counters (a deadlock on PostgreSQL)."""
    counted: dict[tuple[str, str], tuple[QuotaCheck, list[int]]] = {}
    for position in positions:
        record, quota = items[position]
        if quota is not None:
            counted.setdefault((record.org_id, quota.period), (quota, []))[1].append(position)
    return [(counter, quota, group) for counter, (quota, group) in sorted(counted.items())]


def _insert_batch_priors_first(
    conn: Connection,
    sql: _Statements,
    items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]],
) -> list[WriteOutcome]:
    """Look the batch's keys up, grant the quota to the rest, insert those."""
    outcomes: list[WriteOutcome] = [None] * len(items)
    first, repeats = _first_occurrences(items)
    priors = _priors(conn, items)
    fresh: list[int] = []
    for position in first:
        record = items[position][0]
        prior = None
        if record.idempotency_key is not None:
            prior = priors.get((record.org_id, record.idempotency_key))
        if prior is not None:
            outcomes[position] = prior
        else:
            fresh.append(position)

    refused = set()
    for (org_id, _), quota, positions in _metered(items, fresh):
        granted = _grant(conn, sql, org_id, quota, len(positions))
        for position in positions[granted:]:
            outcomes[position] = QUOTA_EXHAUSTED
            refused.add(position)
    for position, source in repeats.items():
        # A repeat shares the fate of the record it repeats: a prior, stored, or refused.
        outcomes[position] = _shared_fate(outcomes[source], items[source][0])

    stored = [items[p][0] for p in fresh if p not in refused]
    if stored:
        _store(conn, sql, stored)
    return outcomes


def _store(conn: Connection, sql: _Statements, records: list[ExecutionRecord]) -> None:
    """Insert records whose keys are known to be free (one executemany), queued for
    the sequencer."""
    _run(conn, sql, sql.insert, [_row(record) for record in records], many=True)
    _queue_for_log(conn, sql, records)


def _queue_for_log(conn: Connection, sql: _Statements, stored: list[ExecutionRecord]) -> None:
    """Queue records just inserted for the sequencer (``log_pending``), in the same
    transaction: committed receipts and the queue never disagree. (PostgreSQL's batch
    insert queues its rows in its own statement: ``_POSTGRESQL_INSERT_NEW_KEYS``.)"""
    rows = [(r.decided_at_ms, r.execution_id, r.org_id, r.leaf_hash) for r in stored]
    _run(conn, sql, sql.queue_for_log, rows, many=True)


def _insert_batch_keys_first(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> list[WriteOutcome] | None:
    """PostgreSQL: insert the batch and let the unique index find the repeats.

    Looking a batch's keys up first depends on the planner: without statistics (a
    new database, or autovacuum off) PostgreSQL reads the lookup through an
    (org_id, ...) index and filters every row of the organization, and a prepared
    statement keeps that plan, so each batch got slower as the table grew (31 ms
    per lookup at 60,000 rows, measured). ``INSERT … ON CONFLICT`` checks each key
    in the unique index itself, whatever the statistics, and waits for another
    writer's uncommitted row with the same key instead of failing on it.

    The quota is granted for every record before we know which are repeats, and
    given back for those that were. Returns ``None``, having counted nothing, when
    a counter row is missing or the whole batch would not fit: then only the exact
    path (look up, then grant) may decide who gets what is left.
    """
    fresh, repeats = _first_occurrences(items)
    granted: list[tuple[str, str, int]] = []
    for (org_id, period), quota, positions in _metered(items, fresh):
        if not _count_whole(conn, org_id, quota, len(positions)):
            for counter_org, counter_period, n in granted:
                conn.exec_driver_sql(_POSTGRESQL.add_to_count, (-n, counter_org, counter_period))
            return None
        granted.append((org_id, period, len(positions)))

    columns = _as_given(sorted((items[p][0] for p in fresh), key=_key_order))
    inserted = {row[0] for row in conn.exec_driver_sql(_POSTGRESQL_INSERT_NEW_KEYS, columns)}

    outcomes: list[WriteOutcome] = [None] * len(items)
    refunds: dict[tuple[str, str], int] = {}
    for position in fresh:
        record, check = items[position]
        if record.execution_id in inserted:
            continue
        assert record.idempotency_key is not None  # only a taken key stops an insert
        prior = prior_execution(conn, record.org_id, record.idempotency_key)
        assert prior is not None  # the conflict proves the row exists
        outcomes[position] = prior
        if check is not None:
            counter = (record.org_id, check.period)
            refunds[counter] = refunds.get(counter, 0) + 1
    for (org_id, period), n in refunds.items():
        conn.exec_driver_sql(_POSTGRESQL.add_to_count, (-n, org_id, period))
    for position, source in repeats.items():
        outcomes[position] = _shared_fate(outcomes[source], items[source][0])
    return outcomes


def one_statement_batch(items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]) -> bool:
    """Whether ``store_in_one_statement`` can take the batch (on PostgreSQL): no
    idempotency key twice in it."""
    keys: set[tuple[str, str]] = set()
    for record, _ in items:
        if record.idempotency_key is not None:
            key = (record.org_id, record.idempotency_key)
            if key in keys:
                return False
            keys.add(key)
    return True


def store_in_one_statement(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> set[str] | None:
    """Store a batch ``one_statement_batch`` accepts in one statement (PostgreSQL); the
    ids of the records stored, or ``None``, having stored nothing, when a quota's counter
    row is missing or has no room left for all of the batch's records it counts.

    Each record is stored unless its idempotency key is taken, queued for the sequencer
    and counted in its quota's period, all by one statement: on a connection in
    autocommit that is the batch's whole transaction, one round trip to the server
    instead of four (``BEGIN``, the count, the insert, ``COMMIT``). Only records stored
    are counted, so a taken key costs no count to give back; the caller looks up the
    priors of the others.

    A limit is checked for the batch whole, taken keys included, so the count never
    passes it; near the limit the statement stores nothing and ``insert_batch``'s exact
    path decides which records still fit. The check is part of the counter row's lock:
    a row another transaction counted while this one waited is checked again as that
    transaction committed it (PostgreSQL re-reads a row it waited to lock).

    The counter rows are locked first, in (org, period) order, then the keys inserted
    in (org, key) order: the order of ``insert_batch``'s paths, so that writers of
    several instances wait for each other in one order and never in a cycle. A missing
    counter row (a period's first execute) is created by ``insert_batch``'s exact path.
    """
    ordered = sorted(items, key=lambda item: _key_order(item[0]))
    orgs, periods, counts, limits = _counters(ordered)
    parameters = (
        orgs,
        periods,
        counts,
        limits,
        *_as_given([record for record, _ in ordered]),
        [None if quota is None else quota.period for _, quota in ordered],  # None: not counted
        len(orgs),
        len(orgs),
    )
    statement = _POSTGRESQL_STORE_IN_ONE_STATEMENT
    stored = {row[0] for row in conn.exec_driver_sql(statement, parameters)}
    if None in stored:
        return None
    return stored


def _counters(
    items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]],
) -> tuple[list[str], list[str], list[int], list[int | None]]:
    """The batch's counters in lock order (``_metered``), as columns: org, period, the
    records it counts, its limit. Two checks of one counter with different limits (a
    plan changed between two decisions of the batch) are held to the lower."""
    orgs: list[str] = []
    periods: list[str] = []
    counts: list[int] = []
    limits: list[int | None] = []
    for (org_id, period), _, positions in _metered(items, range(len(items))):
        given = [q.limit for q in (items[p][1] for p in positions) if q and q.limit is not None]
        orgs.append(org_id)
        periods.append(period)
        counts.append(len(positions))
        limits.append(min(given, default=None))  # None: no limit
    return orgs, periods, counts, limits


def _key_order(record: ExecutionRecord) -> tuple[str, str]:
    """The order a batch's records are inserted in: two writers inserting the same keys
    wait for each other in one order, never in a cycle."""
    return (record.org_id, record.idempotency_key or "")


def _as_given(records: Sequence[ExecutionRecord]) -> tuple[list[Any], ...]:
    """``records`` as the column arrays of ``_GIVEN_ARRAYS``, leaf hashes last."""
    return (*as_columns([_row(record) for record in records]), [r.leaf_hash for r in records])


def _shared_fate(source: WriteOutcome, stored: ExecutionRecord) -> WriteOutcome:
    """What a repeat within a batch gets: its source's prior or refusal, else the
    record the source stored."""
    return source if source is not None else stored.as_prior()


def _count_whole(conn: Connection, org_id: str, quota: QuotaCheck, n: int) -> bool:
    """Count ``n`` executes if the counter row exists and all of them fit."""
    if quota.limit is None:
        result = conn.exec_driver_sql(_POSTGRESQL.count, (n, org_id, quota.period))
    else:
        parameters = (n, org_id, quota.period, n, quota.limit)
        result = conn.exec_driver_sql(_POSTGRESQL.count_if_within, parameters)
    return result.first() is not None


# The writer's statements, as SQL text. They run for every receipt, and through
# SQLAlchemy's Core each execution also cost a cache-key walk over the statement and a
# parameter dict per row: more CPU than the database's own work. They go to the DB-API
# driver as text and parameter tuples: through exec_driver_sql on PostgreSQL, to
# sqlite3 itself on SQLite (_rows, _run).
# The record's fields but its leaf hash, which is queued for the sequencer (log_pending).
_COLUMNS = tuple(name for name in ExecutionRecord.__dataclass_fields__ if name != "leaf_hash")
assert set(_COLUMNS) <= set(executions.c.keys()), "ExecutionRecord names a missing column"
_row = operator.attrgetter(*_COLUMNS)  # a record as its INSERT parameters (a tuple, in C)
_INSERT = (
    f"INSERT INTO executions ({', '.join(_COLUMNS)}) "  # noqa: S608 - constants only
    f"VALUES ({', '.join('?' * len(_COLUMNS))})"
)


@dataclass(frozen=True, slots=True)
class _Statements:
    """One dialect's statements, written with SQLite's ``?`` placeholders."""

    insert: str  # a record's columns, in _COLUMNS order
    insert_new_key: str  # the same, or nothing when the key is taken; RETURNING
    count_if_within: str  # (n, org, period, n, limit): add n if the total stays within limit
    count: str  # (n, org, period): add n, no limit
    ensure_counter: str  # (org, period)
    current_count: str  # (org, period)
    add_to_count: str  # (n, org, period)
    queue_for_log: str  # (decided_at_ms, execution_id, org_id)


_SQLITE = _Statements(
    insert=_INSERT,
    insert_new_key=_INSERT
    + " ON CONFLICT (org_id, idempotency_key) DO NOTHING RETURNING execution_id",
    count_if_within="UPDATE usage_counters SET executes = executes + ?"
    " WHERE org_id = ? AND period = ? AND executes + ? <= ? RETURNING executes",
    count="UPDATE usage_counters SET executes = executes + ?"
    " WHERE org_id = ? AND period = ? RETURNING executes",
    ensure_counter="INSERT INTO usage_counters (org_id, period, executes) VALUES (?, ?, 0)"
    " ON CONFLICT (org_id, period) DO NOTHING",
    current_count="SELECT executes FROM usage_counters WHERE org_id = ? AND period = ?",
    add_to_count="UPDATE usage_counters SET executes = executes + ?"
    " WHERE org_id = ? AND period = ?",
    queue_for_log="INSERT INTO log_pending (decided_at_ms, execution_id, org_id, leaf_hash)"
    " VALUES (?, ?, ?, ?)",
)
_POSTGRESQL = in_format_style(
    _SQLITE,
    # SQLite's write lock is the transaction's; on PostgreSQL, lock the counter row.
    current_count="SELECT executes FROM usage_counters WHERE org_id = %s AND period = %s"
    " FOR UPDATE",
)


# A batch as one array per column: one statement whatever its size, and RETURNING
# names the records whose key was new. The arrays travel in binary (%b): in text
# format psycopg quotes every element through a regular expression in Python, which
# took 37 of 54 ms for 256 rows (cProfile); binary costs what executemany does.
_PG = postgresql.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it untyped
_NAMES = ", ".join(_COLUMNS)
_ARRAYS = ", ".join(f"%b::{executions.c[c].type.compile(dialect=_PG)}[]" for c in _COLUMNS)
_GIVEN_ARRAYS = f"{_ARRAYS}, %b::bytea[]"  # the batch's columns, then its leaf hashes (_as_given)
# Both PostgreSQL batch statements store ``given`` and queue what they stored for the
# sequencer, in the same statement.
_STORED_AND_QUEUED = (
    f" stored AS (INSERT INTO executions ({_NAMES}) SELECT {_NAMES} FROM given"  # noqa: S608
    " ON CONFLICT (org_id, idempotency_key) DO NOTHING"
    " RETURNING decided_at_ms, execution_id, org_id),"
    " queued AS (INSERT INTO log_pending (decided_at_ms, execution_id, org_id, leaf_hash)"
    " SELECT s.decided_at_ms, s.execution_id, s.org_id, g.leaf_hash"
    " FROM stored AS s JOIN given AS g USING (execution_id))"
)
_POSTGRESQL_INSERT_NEW_KEYS = (
    f"WITH given AS (SELECT * FROM unnest({_GIVEN_ARRAYS}) AS g({_NAMES}, leaf_hash)),"  # noqa: S608
    f"{_STORED_AND_QUEUED}"
    " SELECT execution_id FROM stored"
)


# store_in_one_statement's statement. ``locked`` takes the counter rows that have room
# for the batch's records before anything is inserted: ``given`` waits on its count
# (evaluated once, before given's first row), and is empty, so that nothing is stored,
# unless every counter row exists and has room; the last line then answers one NULL.
# ``counted`` adds what ``stored`` returned, grouped so that no counter row is updated
# twice by the one statement.
_POSTGRESQL_STORE_IN_ONE_STATEMENT = (
    "WITH wanted AS (SELECT * FROM unnest("  # noqa: S608 - constants only
    "%b::varchar[], %b::varchar[], %b::int8[], %b::int8[]) AS w(org_id, period, n, most)),"
    " locked AS (SELECT u.org_id, u.period FROM usage_counters AS u"
    " JOIN wanted AS w ON u.org_id = w.org_id AND u.period = w.period"
    " WHERE w.most IS NULL OR u.executes + w.n <= w.most"
    " ORDER BY u.org_id, u.period FOR UPDATE OF u),"
    f" given AS (SELECT * FROM unnest({_GIVEN_ARRAYS}, %b::varchar[])"
    f" AS g({_NAMES}, leaf_hash, period) WHERE (SELECT count(*) FROM locked) = %b),"
    f"{_STORED_AND_QUEUED},"
    " counted AS (UPDATE usage_counters AS u SET executes = u.executes + c.n"
    " FROM (SELECT s.org_id, g.period, count(*) AS n"
    " FROM stored AS s JOIN given AS g USING (execution_id)"
    " WHERE g.period IS NOT NULL GROUP BY s.org_id, g.period) AS c"
    " WHERE u.org_id = c.org_id AND u.period = c.period)"
    " SELECT execution_id FROM stored"
    " UNION ALL SELECT NULL WHERE (SELECT count(*) FROM locked) < %b"
)


def _statements(conn: Connection) -> _Statements:
    return _POSTGRESQL if conn.dialect.name == "postgresql" else _SQLITE


def _rows(conn: Connection, sql: _Statements, statement: str, parameters: Any) -> Sequence[Any]:
    """The rows ``statement`` returns; on SQLite through ``sqlite3`` directly
    (``execute_on_sqlite``: SQLAlchemy's objects per statement cost more than SQLite's
    work on these), on PostgreSQL through SQLAlchemy, whose wrapped errors tell the
    writer that a connection was lost (it reconnects once)."""
    if sql is _SQLITE:
        return execute_on_sqlite(conn, statement, parameters).fetchall()
    return conn.exec_driver_sql(statement, parameters).all()


def _run(
    conn: Connection, sql: _Statements, statement: str, parameters: Any, *, many: bool = False
) -> None:
    """``statement`` for its effect (``many``: once per parameter tuple), as ``_rows``."""
    if sql is _SQLITE:
        execute_on_sqlite(conn, statement, parameters, many=many)
    else:
        conn.exec_driver_sql(statement, parameters)


def _priors(
    conn: Connection, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> dict[tuple[str, str], PriorExecution]:
    """What the batch's keys already stand for (store/executions.py, ``prior_executions``;
    on PostgreSQL the writer looks keys up only near a quota's limit or on a period's
    first write, ``_insert_batch_keys_first``)."""
    keys: dict[str, set[str]] = {}
    for record, _ in items:
        if record.idempotency_key is not None:
            keys.setdefault(record.org_id, set()).add(record.idempotency_key)
    return prior_executions(conn, keys)


def _grant(conn: Connection, sql: _Statements, org_id: str, quota: QuotaCheck, wanted: int) -> int:
    """Count up to ``wanted`` executes; return how many the limit allowed (in order).

    Usually one conditional UPDATE: it takes the counter row's lock (SQLite's write
    lock, or the row lock on PostgreSQL, where a waiting UPDATE re-checks its
    condition against the committed row), so concurrent writers in any number of
    processes or instances are serialized on it and the count is exact. Only when
    the row is missing (the period's first execute) or the limit is near is the
    counter ensured, locked, read and then raised by exactly what still fits.
    """
    if quota.limit is None:
        within = _rows(conn, sql, sql.count, (wanted, org_id, quota.period))
    else:
        parameters = (wanted, org_id, quota.period, wanted, quota.limit)
        within = _rows(conn, sql, sql.count_if_within, parameters)
    if within:
        return wanted
    counter = (org_id, quota.period)
    _run(conn, sql, sql.ensure_counter, counter)
    ((current,),) = _rows(conn, sql, sql.current_count, counter)
    granted = wanted if quota.limit is None else max(0, min(wanted, quota.limit - int(current)))
    if granted:
        _run(conn, sql, sql.add_to_count, (granted, org_id, quota.period))
    return granted
