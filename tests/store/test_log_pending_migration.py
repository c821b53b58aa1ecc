"""Migration 0012: the sequencer's work moves from ``executions.log_index IS NULL`` to the
``log_pending`` queue, which the writer fills in the transaction that stores a receipt;
migration 0013: each queued receipt carries its leaf, computed where it was signed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import pytest
from sqlalchemy import Engine, insert, inspect, select, text

from execauth.store.database import make_engine, migrate, upgrade
from execauth.store.tables import executions, log_leaves, log_pending
from tests.conftest import Database
from tests.store.test_ledger import leaf
from tests.store.test_sequence_pending import (
    NOW,
    ORGS,
    Receipts,
    assert_logs_are_rfc9162,
    create_orgs,
    sequence,
)

ORG = ORGS[0]


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    migrate(engine, "0011")
    create_orgs(engine)
    yield engine
    engine.dispose()


def sequenced_before_0012(engine: Engine, receipts: Receipts, position: int) -> None:
    """What the sequencer before 0012 left for the receipt at ``position`` of ORG."""
    execution_id = f"service_exec_{position + 1:026d}"
    with engine.begin() as conn:
        conn.execute(
            insert(log_leaves).values(
                org_id=ORG,
                log_index=position,
                execution_id=execution_id,
                leaf_hash=leaf(receipts.by_org[ORG][position]),
                sequenced_at=NOW,
            )
        )
        conn.execute(
            text("UPDATE executions SET log_index = :i WHERE execution_id = :e"),
            {"i": position, "e": execution_id},
        )


def stored_before_0012(engine: Engine, receipts: Receipts, org_ids: list[str]) -> None:
    """Rows as the writer before 0012 stored them: nothing queued, ``log_index`` NULL."""
    with engine.begin() as conn:
        rows = [asdict(r) for r in receipts.records(org_ids)]
        names = [column.name for column in executions.columns]  # not the queue's leaf
        conn.execute(insert(executions), [{name: row[name] for name in names} for row in rows])


def test_receipts_not_yet_sequenced_are_queued_and_continue_the_log(engine: Engine) -> None:
    receipts = Receipts(engine)
    stored_before_0012(engine, receipts, [ORG, ORG, ORG])
    sequenced_before_0012(engine, receipts, 0)
    upgrade(engine)
    with engine.connect() as conn:
        queued = conn.execute(select(log_pending.c.execution_id)).scalars().all()
    assert queued == [f"service_exec_{n:026d}" for n in (2, 3)]
    assert sequence(engine, limit=10) == [1_795_000_000_002, 1_795_000_000_003]
    assert_logs_are_rfc9162(engine, receipts)


def test_receipts_stored_after_0012_are_queued_as_they_are_stored(engine: Engine) -> None:
    upgrade(engine)
    receipts = Receipts(engine)
    receipts.store([ORG, ORGS[1], ORG])
    with engine.connect() as conn:
        assert len(conn.execute(select(log_pending)).all()) == 3
    assert len(sequence(engine, limit=10)) == 3
    with engine.connect() as conn:
        assert conn.execute(select(log_pending)).first() is None
    assert_logs_are_rfc9162(engine, receipts)


def test_downgrade_gives_each_row_its_log_index_back(engine: Engine) -> None:
    upgrade(engine)
    receipts = Receipts(engine)
    receipts.store([ORG, ORG])
    sequence(engine, limit=10)
    receipts.store([ORG])  # still queued
    migrate(engine, "0011", down=True)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT execution_id, log_index FROM executions ORDER BY decided_at_ms")
        ).all()
    assert [tuple(row) for row in rows] == [
        (f"service_exec_{n:026d}", index) for n, index in ((1, 0), (2, 1), (3, None))
    ]
    assert "log_pending" not in inspect(engine).get_table_names()


def test_downgrade_from_0013_keeps_the_queue_and_its_receipts_are_placed(engine: Engine) -> None:
    upgrade(engine)
    receipts = Receipts(engine)
    receipts.store([ORG, ORGS[1]])
    migrate(engine, "0012", down=True)
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("log_pending")}
        assert len(conn.execute(text("SELECT execution_id FROM log_pending")).all()) == 2
    assert "leaf_hash" not in columns
    upgrade(engine)  # queued without their leaves again: read from the stored receipts
    assert len(sequence(engine, limit=10)) == 2
    assert_logs_are_rfc9162(engine, receipts)
