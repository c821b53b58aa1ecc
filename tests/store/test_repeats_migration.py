"""Migration 0006: repeats stored one lineage row each before it become one counted row."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, insert

from execauth.store.database import make_engine, migrate, upgrade
from execauth.store.executions import ExecutionStore
from execauth.store.tables import execution_events
from tests.conftest import Database

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    yield engine
    engine.dispose()


def test_repeat_rows_from_before_0006_become_one_count_per_execution(engine: Engine) -> None:
    migrate(engine, "0005")
    with engine.begin() as conn:
        for n in range(3):
            conn.execute(
                insert(execution_events).values(
                    event_id=f"lin_{n}",
                    execution_id="service_exec_a",
                    org_id="org_a",
                    occurred_at=NOW + timedelta(seconds=n),
                    kind="idempotent_repeat",
                    details='{"idempotency_key": "k"}',
                )
            )
    upgrade(engine)
    [repeats] = ExecutionStore(engine).lineage("org_a", "service_exec_a")
    assert (repeats.kind, repeats.occurred_at) == ("idempotent_repeat", NOW + timedelta(seconds=2))
    assert repeats.details == {"repeats": 3, "first_repeated_at": "2026-11-23T10:00:00.000Z"}
