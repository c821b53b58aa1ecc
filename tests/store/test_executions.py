"""The writer's two paths into the store: ``insert_batch`` and ``insert_execution``.

Both run the same rules (docs/api.md, "Idempotency"): a repeat of an idempotency key is answered
with its prior execution and not counted; the quota is counted exactly, in order;
nothing is stored past the limit. Where the batch path looks its keys up first (SQLite,
and PostgreSQL near a quota's limit), it has to fail whole when another writer stored
one of its keys in the meantime, so that the writer redoes it one record at a time; the
single path absorbs that race itself. Elsewhere on PostgreSQL the batch is inserted
first and the unique index finds the repeats, statistics or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, func, select, text
from sqlalchemy.exc import IntegrityError

from execauth.errors import QuotaExceeded, ReceiptIdTaken, ServiceUnavailable
from execauth.serving.receipt_writer import ReceiptWriter
from execauth.store import execution_writes as store
from execauth.store.control import ControlStore
from execauth.store.database import make_engine, upgrade
from execauth.store.execution_writes import (
    QUOTA_EXHAUSTED,
    QuotaExhausted,
    insert_batch,
    insert_execution,
    one_statement_batch,
    store_in_one_statement,
)
from execauth.store.executions import (
    ExecutionRecord,
    ExecutionStore,
    PriorExecution,
    Repeat,
    count_repeats,
    executes_in_period,
    prior_execution,
)
from execauth.store.tables import execution_events, execution_repeats, executions, log_pending
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org
from execauth.tenancy.quota import QuotaCheck
from tests.conftest import Database

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
ORG, OTHER = "org_01writer", "org_01other"
PERIOD = "2026-11"
_ids = itertools.count()


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    upgrade(engine)
    control = ControlStore(engine)
    for org_id in (ORG, OTHER):
        control.create_org(
            Org(org_id, "Writer", "free", "a", NOW),
            AuditEvent(org_id, NOW, "test", "org.created", org_id),
        )
    yield engine
    engine.dispose()


def quota(limit: int | None, period: str = PERIOD) -> QuotaCheck:
    return QuotaCheck("free", period, limit, datetime(2026, 12, 1, tzinfo=UTC))


def record(key: str | None = None, org_id: str = ORG) -> ExecutionRecord:
    n = next(_ids)
    return ExecutionRecord(
        execution_id=f"service_exec_{n:026d}",
        receipt_id=f"service_rcpt_{n:016x}",
        org_id=org_id,
        idempotency_key=key,
        request_digest=f"sha256:{n:064x}",
        surface="deploy.production",
        actor="release-bot",
        decision="PERMIT",
        policy_id="deploys",
        policy_version=1,
        rule_id="main-only",
        reason=None,
        decided_at_ms=1_795_000_000_000 + n,
        # Quotes, a backslash, a comma, braces and non-ASCII: what array literals must escape.
        evaluation_input='{"request": {"note": "naïve \\"quoted\\", {x} \\\\ 東京"}}',
        receipt=b'{"receipt_id": "service_rcpt_%d"}' % n,
    )


def prior_of(stored: ExecutionRecord) -> PriorExecution:
    return PriorExecution(
        stored.execution_id, stored.request_digest, stored.decision, stored.receipt
    )


def batch(engine: Engine, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]) -> list[Any]:
    with engine.begin() as conn:
        return insert_batch(conn, items)


def single(engine: Engine, item: ExecutionRecord, check: QuotaCheck | None) -> Any:
    with engine.begin() as conn:
        return insert_execution(conn, item, check)


def count_one_repeat(engine: Engine, execution_id: str, at: datetime) -> None:
    with engine.begin() as conn:
        count_repeats(conn, [Repeat(ORG, execution_id, at)])


def stored_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(executions.c.execution_id)).scalars())


def counted(engine: Engine, org_id: str = ORG, period: str = PERIOD) -> int:
    with engine.connect() as conn:
        return executes_in_period(conn, org_id, period)


def test_a_batch_stores_every_record_byte_for_byte_and_counts_each(engine: Engine) -> None:
    records = [record(f"k{i}") for i in range(5)] + [record(None)]
    assert batch(engine, [(r, quota(100)) for r in records]) == [None] * 6
    with engine.connect() as conn:
        rows = conn.execute(select(executions).order_by(executions.c.decided_at_ms)).mappings()
        stored = [
            ExecutionRecord(**{c.name: row[c.name] for c in executions.columns}) for row in rows
        ]
    assert stored == records
    assert counted(engine) == 6  # the counter row did not exist: created by the batch


def test_a_key_stored_earlier_is_answered_with_its_prior_and_not_counted(engine: Engine) -> None:
    first = record("deploy-1")
    assert batch(engine, [(first, quota(100)), (record("other"), quota(100))]) == [None, None]
    again = record("deploy-1")
    outcomes = batch(engine, [(again, quota(100)), (record("new"), quota(100))])
    assert outcomes == [prior_of(first), None]
    assert again.execution_id not in stored_ids(engine)
    assert counted(engine) == 3


def test_many_keys_of_many_orgs_are_looked_up_at_once(engine: Engine) -> None:
    ours, theirs = record("deploy-1"), record("deploy-1", org_id=OTHER)
    batch(engine, [(ours, None), (theirs, None), (record("deploy-2"), None)])

    found = ExecutionStore(engine).by_idempotency_keys(
        {ORG: ["deploy-1", "never-used"], OTHER: ["deploy-1", "deploy-2"]}
    )

    assert found == {(ORG, "deploy-1"): prior_of(ours), (OTHER, "deploy-1"): prior_of(theirs)}


def test_a_key_repeated_within_a_batch_is_a_repeat_of_its_first_record(engine: Engine) -> None:
    first, repeat, other_org = record("same"), record("same"), record("same", OTHER)
    outcomes = batch(engine, [(first, quota(100)), (repeat, quota(100)), (other_org, quota(100))])
    assert outcomes == [None, prior_of(first), None]  # keys are per organization
    assert repeat.execution_id not in stored_ids(engine)
    assert counted(engine) == 1
    assert counted(engine, OTHER) == 1


def test_a_batch_gets_exactly_what_is_left_of_the_quota_in_batch_order(engine: Engine) -> None:
    assert batch(engine, [(record(f"a{i}"), quota(5)) for i in range(3)]) == [None] * 3
    records = [record(f"b{i}") for i in range(4)]
    outcomes = batch(engine, [(r, quota(5)) for r in records])
    assert outcomes == [None, None, QUOTA_EXHAUSTED, QUOTA_EXHAUSTED]
    assert stored_ids(engine) >= {records[0].execution_id, records[1].execution_id}
    assert not stored_ids(engine) & {records[2].execution_id, records[3].execution_id}
    assert counted(engine) == 5
    assert batch(engine, [(record("c"), quota(5))]) == [QUOTA_EXHAUSTED]
    assert counted(engine) == 5


def test_a_repeat_within_a_batch_shares_the_fate_of_the_record_it_repeats(
    engine: Engine,
) -> None:
    stored, refused = record("fits"), record("too-many")
    outcomes = batch(
        engine,
        [
            (stored, quota(1)),
            (refused, quota(1)),
            (record("fits"), quota(1)),
            (record("too-many"), quota(1)),
        ],
    )
    assert outcomes == [None, QUOTA_EXHAUSTED, prior_of(stored), QUOTA_EXHAUSTED]
    assert counted(engine) == 1


def test_a_quota_already_past_its_limit_refuses_the_whole_batch(engine: Engine) -> None:
    # A plan change can lower the limit below what the month has already counted.
    assert batch(engine, [(record(), quota(None)) for _ in range(4)]) == [None] * 4
    outcomes = batch(engine, [(record(), quota(2)) for _ in range(3)])
    assert all(isinstance(outcome, QuotaExhausted) for outcome in outcomes)
    assert counted(engine) == 4


def test_each_org_and_period_is_counted_on_its_own(engine: Engine) -> None:
    items = [
        (record(), quota(2)),
        (record(org_id=OTHER), quota(1)),
        (record(), quota(2)),
        (record(org_id=OTHER), quota(1)),
        (record(), quota(2, "2026-12")),
        (record(), None),  # not metered: stored, counted nowhere
    ]
    assert batch(engine, items) == [None, None, None, QUOTA_EXHAUSTED, None, None]
    assert (counted(engine), counted(engine, OTHER), counted(engine, ORG, "2026-12")) == (2, 1, 1)


def test_a_key_stored_earlier_and_repeated_within_a_batch_gets_its_prior_each_time(
    engine: Engine,
) -> None:
    first = record("twice")
    assert batch(engine, [(first, quota(100))]) == [None]
    outcomes = batch(engine, [(record("twice"), quota(100)), (record("twice"), quota(100))])
    assert outcomes == [prior_of(first), prior_of(first)]
    assert counted(engine) == 1


def test_a_batch_that_fits_only_without_its_repeats_still_stores_its_new_records(
    engine: Engine,
) -> None:
    first = record("a")
    assert batch(engine, [(first, quota(3))]) == [None]
    outcomes = batch(engine, [(record(k), quota(3)) for k in ("a", "b", "c")])
    assert outcomes == [prior_of(first), None, None]
    assert counted(engine) == 3


def test_a_batch_one_org_cannot_fit_counts_the_other_org_exactly_once(engine: Engine) -> None:
    assert batch(engine, [(record(org_id=OTHER), quota(100)), (record(), quota(2))]) == [None] * 2
    items: list[tuple[ExecutionRecord, QuotaCheck | None]] = [
        (record(org_id=OTHER), quota(100)),
        (record(), quota(2)),
        (record(), quota(2)),
    ]
    assert batch(engine, items) == [None, None, QUOTA_EXHAUSTED]
    assert (counted(engine, OTHER), counted(engine)) == (2, 2)


postgres_only = pytest.mark.parametrize("database", ["postgres"], indirect=True)


@postgres_only
def test_a_batch_of_new_keys_is_stored_without_looking_its_keys_up(engine: Engine) -> None:
    # A lookup's plan depends on statistics a new database does not have (see
    # store/executions.py); the unique index's conflict check does not.
    assert batch(engine, [(record("warm"), quota(100))]) == [None]  # the counter row exists
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    assert batch(engine, [(record(f"new-{i}"), quota(100)) for i in range(5)]) == [None] * 5
    assert statements
    assert not [s for s in statements if "FROM executions" in s]
    assert counted(engine) == 6


@postgres_only
def test_a_key_another_writer_has_not_committed_yet_is_a_repeat_once_it_commits(
    engine: Engine,
) -> None:
    assert batch(engine, [(record("warm"), quota(100))]) == [None]
    theirs = record("raced")
    outcomes: list[Any] = []
    with engine.connect() as other:
        with other.begin():
            assert insert_execution(other, theirs, None) is None  # holds the key, uncommitted
            ours = threading.Thread(
                target=lambda: outcomes.extend(
                    batch(engine, [(record("raced"), quota(100)), (record("mine"), quota(100))])
                )
            )
            ours.start()
            ours.join(0.5)  # by now ours is usually waiting on their key in the unique index
        ours.join(10)
    assert outcomes == [prior_of(theirs), None]
    assert counted(engine) == 2  # warm and mine; the repeat was given back


def test_a_key_another_writer_stored_after_the_lookup_fails_the_whole_batch(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer then redoes the batch one record at a time (serving/receipt_writer.py).
    lookup = store._priors
    theirs = record("raced")

    def priors_then_another_writer(conn: Connection, *args: Any) -> Any:
        found = lookup(conn, *args)
        single(engine, theirs, quota(100))  # another instance, committed meanwhile
        return found

    monkeypatch.setattr(store, "_priors", priors_then_another_writer)
    ours = [record("mine"), record("raced")]
    with pytest.raises(IntegrityError):
        batch(engine, [(r, quota(100)) for r in ours])
    monkeypatch.undo()
    assert stored_ids(engine) == {theirs.execution_id}
    assert counted(engine) == 1  # the failed batch's count was rolled back with it
    assert [single(engine, r, quota(100)) for r in ours] == [None, prior_of(theirs)]
    assert counted(engine) == 2


# --- one statement a batch (PostgreSQL) -----------------------------------------------------
def in_one_statement(
    engine: Engine, items: Sequence[tuple[ExecutionRecord, QuotaCheck | None]]
) -> Any:
    with engine.connect() as conn:
        return store_in_one_statement(conn.execution_options(isolation_level="AUTOCOMMIT"), items)


def queued_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(log_pending.c.execution_id)).scalars())


def test_a_batch_is_for_one_statement_unless_it_holds_a_key_twice() -> None:
    assert one_statement_batch([(record("a"), quota(None)), (record("b"), None), (record(), None)])
    assert one_statement_batch([(record("a"), quota(None)), (record("b"), quota(100))])
    assert not one_statement_batch([(record("a"), quota(None)), (record("a"), quota(None))])
    assert one_statement_batch([(record("a"), quota(None)), (record("a", OTHER), quota(None))])


@postgres_only
def test_one_statement_stores_queues_and_counts_a_batch(engine: Engine) -> None:
    assert batch(engine, [(record("warm"), quota(None))]) == [None]  # the counter row exists
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    records = [record(f"new-{i}") for i in range(4)] + [record(org_id=OTHER)]
    stored = in_one_statement(
        engine, [(r, quota(None)) for r in records[:4]] + [(records[4], None)]
    )
    assert len(statements) == 1
    assert stored == {r.execution_id for r in records}
    assert queued_ids(engine) >= stored
    assert counted(engine) == 5  # warm and the four; the record without a quota is not counted
    assert counted(engine, OTHER) == 0


@postgres_only
def test_one_statement_leaves_a_taken_key_unstored_and_uncounted(engine: Engine) -> None:
    first = record("taken")
    assert batch(engine, [(first, quota(None))]) == [None]
    again, fresh = record("taken"), record("fresh")
    stored = in_one_statement(engine, [(again, quota(None)), (fresh, quota(None))])
    assert stored == {fresh.execution_id}
    assert again.execution_id not in stored_ids(engine) | queued_ids(engine)
    assert counted(engine) == 2


@postgres_only
def test_one_statement_stores_nothing_while_a_counter_row_is_missing(engine: Engine) -> None:
    # A period's first execute: insert_batch's exact path creates the row.
    ours = record("first-of-the-month")
    assert in_one_statement(engine, [(ours, quota(None))]) is None
    assert ours.execution_id not in stored_ids(engine) | queued_ids(engine)
    assert counted(engine) == 0


@postgres_only
def test_one_statement_takes_the_counter_row_before_any_key(engine: Engine) -> None:
    # insert_batch counts first and inserts after; were one statement to insert its keys
    # first, the two would wait for each other here, and PostgreSQL would abort one.
    assert batch(engine, [(record("warm"), quota(None))]) == [None]
    theirs, ours, mine = record("both"), record("both"), record("mine")
    results: list[Any] = []
    with engine.connect() as other:
        with other.begin():
            assert insert_batch(other, [(record("counted-first"), quota(None))]) == [None]
            worker = threading.Thread(
                target=lambda: results.append(
                    in_one_statement(engine, [(ours, quota(None)), (mine, quota(None))])
                )
            )
            worker.start()
            worker.join(0.5)  # by now ours is usually waiting on the counter row
            assert insert_execution(other, theirs, quota(None)) is None
        worker.join(10)
    assert results == [{mine.execution_id}]
    assert theirs.execution_id in stored_ids(engine)
    assert counted(engine) == 4  # warm, the other transaction's two, mine


@postgres_only
def test_one_statement_stores_and_counts_a_batch_within_its_limit(engine: Engine) -> None:
    assert batch(engine, [(record("warm"), quota(5))]) == [None]
    records = [record(f"new-{i}") for i in range(4)]
    stored = in_one_statement(engine, [(r, quota(5)) for r in records])
    assert stored == {r.execution_id for r in records}
    assert counted(engine) == 5  # the limit, reached and not passed


@postgres_only
def test_one_statement_stores_nothing_when_the_limit_lacks_room_for_the_whole_batch(
    engine: Engine,
) -> None:
    assert batch(engine, [(record("warm"), quota(4))]) == [None]
    items = [(record(f"new-{i}"), quota(4)) for i in range(4)]
    assert in_one_statement(engine, items) is None
    assert stored_ids(engine).isdisjoint(r.execution_id for r, _ in items)
    assert counted(engine) == 1
    # The exact path then gives out what is left, in batch order.
    assert batch(engine, items) == [None, None, None, QUOTA_EXHAUSTED]


@postgres_only
def test_one_statement_checks_a_taken_key_against_the_limit_too(engine: Engine) -> None:
    # Whether a key is taken is known only once it is inserted, after the check: the
    # check counts every record, and near the limit the exact path sorts them out.
    first = record("taken")
    assert batch(engine, [(first, quota(2))]) == [None]
    items = [(record("taken"), quota(2)), (record("fresh"), quota(2))]
    assert in_one_statement(engine, items) is None
    assert batch(engine, items) == [prior_of(first), None]
    assert counted(engine) == 2


@postgres_only
def test_one_statement_holds_a_counter_checked_with_two_limits_to_the_lower(
    engine: Engine,
) -> None:
    assert batch(engine, [(record("warm"), quota(100))]) == [None]
    assert in_one_statement(engine, [(record("a"), quota(100)), (record("b"), quota(2))]) is None
    assert counted(engine) == 1


def wait_until_waiting_for_a_lock(engine: Engine, statement_start: str) -> None:
    """Until a statement beginning ``statement_start`` waits for a row lock."""
    deadline = time.monotonic() + 10
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND starts_with(query, :start)"
    )
    with engine.connect() as conn:
        while conn.execute(waiting, {"start": statement_start}).scalar_one() == 0:
            assert time.monotonic() < deadline, "the statement never waited for the lock"
            time.sleep(0.01)
            conn.rollback()  # a fresh snapshot of pg_stat_activity


@postgres_only
def test_one_statement_checks_the_limit_against_a_count_committed_while_it_waited(
    engine: Engine,
) -> None:
    assert batch(engine, [(record("warm"), quota(3))]) == [None]
    ours = record("ours")
    results: list[Any] = []
    with engine.connect() as other:
        with other.begin():
            # Counts up to the limit and holds the counter row until it commits.
            assert insert_batch(other, [(record(), quota(3)), (record(), quota(3))]) == [None] * 2
            worker = threading.Thread(
                target=lambda: results.append(in_one_statement(engine, [(ours, quota(3))]))
            )
            worker.start()
            # Before the commit, the count ours reads (1 of 3) leaves room for it.
            wait_until_waiting_for_a_lock(engine, "WITH wanted AS")
        worker.join(10)
    assert results == [None]
    assert ours.execution_id not in stored_ids(engine) | queued_ids(engine)
    assert counted(engine) == 3


@postgres_only
@pytest.mark.parametrize("limit", [None, 1000])
def test_the_writer_stores_a_batch_in_one_statement(engine: Engine, limit: int | None) -> None:
    first = record("before")
    retried = dataclasses.replace(record("before"), request_digest=first.request_digest)
    records = [record(f"new-{i}") for i in range(3)] + [retried]
    statements: list[str] = []

    async def send_all() -> list[Any]:
        writer = ReceiptWriter(engine, timeout_seconds=10.0)
        writer.start()
        try:
            assert batch(engine, [(first, quota(limit))]) == [None]

            @event.listens_for(engine, "before_cursor_execute")
            def _seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
                statements.append(statement)

            return await asyncio.gather(*(writer.write(r, quota(limit)) for r in records))
        finally:
            writer.stop()

    answers = asyncio.run(send_all())
    assert answers == [None, None, None, prior_of(first)]
    # One statement stored what was new (in one batch, or more if the writer's thread
    # woke between the writes); only the taken key went on through a transaction, whose
    # count and give-back are the only counter updates of their own.
    assert statements[0].startswith("WITH wanted AS")
    assert len([s for s in statements if s.startswith("UPDATE usage_counters")]) == 2
    assert counted(engine) == 4
    [repeats] = ExecutionStore(engine).lineage(ORG, first.execution_id)
    assert repeats.details["repeats"] == 1


def test_one_record_is_stored_and_counted(engine: Engine) -> None:
    first = record("one")
    assert single(engine, first, quota(2)) is None
    assert single(engine, record(None), quota(2)) is None
    assert single(engine, record("two"), quota(2)) is QUOTA_EXHAUSTED
    assert single(engine, record("one"), quota(2)) == prior_of(first)  # a repeat: no quota
    assert single(engine, record(None), None) is None
    assert single(engine, record(None), quota(None, "2026-12")) is None
    assert (counted(engine), counted(engine, ORG, "2026-12")) == (2, 1)


def test_one_repeat_well_within_the_quota_is_answered_with_its_prior_and_not_counted(
    engine: Engine,
) -> None:
    first = record("again")
    assert single(engine, first, quota(100)) is None
    assert single(engine, record("again"), quota(100)) == prior_of(first)
    assert single(engine, record("again"), None) == prior_of(first)
    assert stored_ids(engine) == {first.execution_id}
    assert counted(engine) == 1


@postgres_only
def test_one_record_with_a_new_key_is_stored_without_looking_its_key_up(engine: Engine) -> None:
    assert single(engine, record("warm"), quota(100)) is None  # the counter row exists
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    assert single(engine, record("new"), quota(100)) is None
    assert single(engine, record("unmetered"), None) is None
    assert statements
    assert not [s for s in statements if "FROM executions" in s]
    assert counted(engine) == 2


def test_one_record_whose_key_another_writer_just_stored_is_a_repeat_and_not_counted(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = record("raced")
    lookups: list[str] = []

    def lookup(conn: Connection, org_id: str, key: str) -> PriorExecution | None:
        if not lookups:  # between our lookup and our insert, another instance commits
            lookups.append(key)
            single(engine, theirs, quota(100))
            return None
        return prior_execution(conn, org_id, key)

    monkeypatch.setattr(store, "prior_execution", lookup)
    assert single(engine, record("raced"), quota(100)) == prior_of(theirs)
    assert stored_ids(engine) == {theirs.execution_id}
    assert counted(engine) == 1  # theirs; ours was refunded


def test_the_prior_of_a_key_is_found_on_the_read_path_too(engine: Engine) -> None:
    first = record("read")
    single(engine, first, None)
    with engine.connect() as conn:
        assert prior_execution(conn, ORG, "read") == prior_of(first)
        assert prior_execution(conn, OTHER, "read") is None
        assert conn.execute(select(func.count()).select_from(executions)).scalar_one() == 1


def test_repeats_of_an_execution_are_one_row_with_a_count_and_the_last_time(
    engine: Engine,
) -> None:
    first = record("repeated")
    single(engine, first, None)
    reads = ExecutionStore(engine)
    for minute in range(1_000):
        count_one_repeat(engine, first.execution_id, NOW + timedelta(minutes=minute))
    with engine.connect() as conn:
        rows = conn.execute(select(func.count()).select_from(execution_repeats)).scalar_one()
        lineage_rows = conn.execute(select(func.count()).select_from(execution_events)).scalar_one()
    assert (rows, lineage_rows) == (1, 0)
    [repeats] = reads.lineage(ORG, first.execution_id)
    assert repeats.kind == "idempotent_repeat"
    assert repeats.occurred_at == NOW + timedelta(minutes=999)
    assert repeats.details == {"repeats": 1_000, "first_repeated_at": "2026-11-23T10:00:00.000Z"}


def test_a_repeat_recorded_late_moves_the_first_time_back(engine: Engine) -> None:
    first = record("early")
    single(engine, first, None)
    count_one_repeat(engine, first.execution_id, NOW + timedelta(seconds=5))
    count_one_repeat(engine, first.execution_id, NOW)  # another worker's, committed later
    [repeats] = ExecutionStore(engine).lineage(ORG, first.execution_id)
    assert repeats.details == {"repeats": 2, "first_repeated_at": "2026-11-23T10:00:00.000Z"}


def test_a_repeat_recorded_late_does_not_move_the_last_time_back(engine: Engine) -> None:
    first = record("late")
    single(engine, first, None)
    reads = ExecutionStore(engine)
    count_one_repeat(engine, first.execution_id, NOW + timedelta(seconds=5))
    count_one_repeat(engine, first.execution_id, NOW)  # another worker's, committed later
    [repeats] = reads.lineage(ORG, first.execution_id)
    assert repeats.occurred_at == NOW + timedelta(seconds=5)
    assert repeats.details["repeats"] == 2


def test_repeats_of_several_executions_counted_at_once_are_one_row_each(engine: Engine) -> None:
    """A batch's repeats go in one statement: each execution's are merged into its row, and
    added to what earlier batches counted."""
    first, second = record("first"), record("second")
    batch(engine, [(first, None), (second, None)])
    count_one_repeat(engine, first.execution_id, NOW + timedelta(seconds=30))
    with engine.begin() as conn:
        count_repeats(
            conn,
            [
                Repeat(ORG, first.execution_id, NOW + timedelta(seconds=10)),
                Repeat(ORG, second.execution_id, NOW + timedelta(seconds=20)),
                Repeat(ORG, first.execution_id, NOW + timedelta(seconds=40)),
            ],
        )
    reads = ExecutionStore(engine)
    [of_first] = reads.lineage(ORG, first.execution_id)
    [of_second] = reads.lineage(ORG, second.execution_id)
    assert of_first.occurred_at == NOW + timedelta(seconds=40)
    assert of_first.details == {"repeats": 3, "first_repeated_at": "2026-11-23T10:00:10.000Z"}
    assert of_second.occurred_at == NOW + timedelta(seconds=20)
    assert of_second.details == {"repeats": 1, "first_repeated_at": "2026-11-23T10:00:20.000Z"}


def test_repeats_are_listed_among_other_lineage_events_by_time(engine: Engine) -> None:
    first = record("mixed")
    single(engine, first, None)
    reads = ExecutionStore(engine)
    count_one_repeat(engine, first.execution_id, NOW + timedelta(seconds=10))
    reads.record_lineage(ORG, first.execution_id, "replay", NOW, {"matches": True})
    assert [e.kind for e in reads.lineage(ORG, first.execution_id)] == [
        "replay",
        "idempotent_repeat",
    ]
    assert reads.lineage(OTHER, first.execution_id) == []


@postgres_only
def test_the_writer_refuses_exactly_what_is_past_the_limit(engine: Engine) -> None:
    # One statement cannot take a batch the limit has no room for; the transaction can.
    records = [record(f"near-{i}") for i in range(4)]

    async def send_all() -> list[Any]:
        writer = ReceiptWriter(engine, timeout_seconds=10.0)
        writer.start()
        try:
            assert await writer.write(record("warm"), quota(3)) is None
            writes = (writer.write(r, quota(3)) for r in records)
            return await asyncio.gather(*writes, return_exceptions=True)
        finally:
            writer.stop()

    answers = asyncio.run(send_all())
    assert answers.count(None) == 2
    assert len([a for a in answers if isinstance(a, QuotaExceeded)]) == 2
    assert counted(engine) == 3


@postgres_only
def test_the_writer_skips_the_one_statement_for_a_quota_it_found_used_up(engine: Engine) -> None:
    # The statement could only store nothing before the transaction refuses the record.
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    async def one_statement_tried(item: ExecutionRecord, check: QuotaCheck) -> tuple[Any, bool]:
        statements.clear()
        answer = await asyncio.gather(writer.write(item, check), return_exceptions=True)
        return answer[0], any(s.startswith("WITH wanted AS") for s in statements)

    async def send() -> list[tuple[Any, bool]]:
        writer.start()
        try:
            assert await writer.write(record("warm"), quota(1)) is None
            assert await writer.write(record("warm", OTHER), quota(5)) is None
            return [
                await one_statement_tried(record(), quota(1)),
                await one_statement_tried(record(), quota(1)),
                await one_statement_tried(record(org_id=OTHER), quota(5)),
            ]
        finally:
            writer.stop()

    writer = ReceiptWriter(engine, timeout_seconds=10.0)
    (first, tried_first), (again, tried_again), (other, tried_other) = asyncio.run(send())
    assert isinstance(first, QuotaExceeded)
    assert isinstance(again, QuotaExceeded)
    assert other is None
    assert [tried_first, tried_again, tried_other] == [True, False, True]  # per quota
    assert counted(engine) == 1


def test_the_writer_counts_the_repeats_it_finds(engine: Engine) -> None:
    """In the transaction that found them: a retry storm adds no write transaction of its
    own to compete for the write lock (docs/decisions.md, "repeats")."""
    first = record("stormed")
    conflicting = dataclasses.replace(first, request_digest="sha256:" + "1" * 64)

    async def send_all() -> list[PriorExecution | None]:
        writer = ReceiptWriter(engine, timeout_seconds=10.0)
        writer.start()
        try:
            answers = [await writer.write(first)]
            # The same request twice in one batch, and once with another request's digest.
            answers += await asyncio.gather(
                writer.write(first), writer.write(first), writer.write(conflicting)
            )
            return answers
        finally:
            writer.stop()

    answers = asyncio.run(send_all())
    assert answers == [None, prior_of(first), prior_of(first), prior_of(first)]
    [repeats] = ExecutionStore(engine).lineage(ORG, first.execution_id)
    assert repeats.details["repeats"] == 2  # the conflicting request is not a repeat


# --- receipt ids that meet (receipts.new_receipt_id: 22 random bits a millisecond) -------
def write_after(engine: Engine, first: ExecutionRecord, *records: ExecutionRecord) -> list[Any]:
    """What the writer answers to ``records``, sent together once ``first`` is stored."""

    async def send() -> list[Any]:
        writer = ReceiptWriter(engine, timeout_seconds=10.0)
        writer.start()
        try:
            assert await writer.write(first) is None
            return await asyncio.gather(*(writer.write(r) for r in records), return_exceptions=True)
        finally:
            writer.stop()

    return asyncio.run(send())


def test_a_receipt_id_another_receipt_holds_is_refused_as_taken_and_not_stored(
    engine: Engine,
) -> None:
    first, neighbour = record(), record()
    clash = dataclasses.replace(record(), receipt_id=first.receipt_id)

    answers = write_after(engine, first, clash, neighbour)

    assert isinstance(answers[0], ReceiptIdTaken)
    assert answers[1] is None  # its batch's other record is stored all the same
    assert stored_ids(engine) == {first.execution_id, neighbour.execution_id}


def test_a_record_refused_for_another_unique_column_is_unavailable_not_taken(
    engine: Engine,
) -> None:
    first = record()
    same_execution = dataclasses.replace(record(), execution_id=first.execution_id)

    [answer] = write_after(engine, first, same_execution)

    assert isinstance(answer, ServiceUnavailable)
    assert not isinstance(answer, ReceiptIdTaken)
    assert stored_ids(engine) == {first.execution_id}
