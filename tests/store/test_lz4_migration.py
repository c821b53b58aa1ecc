"""Migration 0015: on PostgreSQL the large columns of ``executions`` are compressed with
LZ4 (docs/decisions.md, "LZ4 for the receipts' large columns on PostgreSQL")."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select, text

from execauth.store.control import ControlStore
from execauth.store.database import make_engine, migrate, upgrade
from execauth.store.tables import executions
from execauth.tenancy.audit import AuditEvent
from execauth.tenancy.orgs import Org
from tests.conftest import Database
from tests.store.test_executions import NOW, ORG, batch, quota, record

postgres_only = pytest.mark.parametrize("database", ["postgres"], indirect=True)


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    upgrade(engine)
    ControlStore(engine).create_org(
        Org(ORG, "LZ4", "free", "a", NOW), AuditEvent(ORG, NOW, "test", "org.created", ORG)
    )
    yield engine
    engine.dispose()


def a_large_request() -> str:
    """About 60 KiB of a plan-like request: repeated structure, ids that do not repeat."""
    changes = [
        {"address": f"module.web[{n}].aws_instance.app", "ami": f"ami-{n:032x}"} for n in range(900)
    ]
    return json.dumps({"request": {"surface": "infra.apply", "payload": {"changes": changes}}})


def compression_of(engine: Engine, column: str) -> str:
    """The method set on ``executions.column``: ``l`` for LZ4, empty for the default."""
    with engine.connect() as conn:
        return str(
            conn.execute(
                text(
                    "SELECT attcompression FROM pg_attribute"
                    " WHERE attrelid = 'executions'::regclass AND attname = :column"
                ),
                {"column": column},
            ).scalar_one()
        )


def test_a_large_request_is_stored_and_read_back_byte_for_byte(engine: Engine) -> None:
    stored = dataclasses.replace(record("large"), evaluation_input=a_large_request())
    assert batch(engine, [(stored, quota(None))]) == [None]
    with engine.connect() as conn:
        read = conn.execute(
            select(executions.c.evaluation_input).where(
                executions.c.execution_id == stored.execution_id
            )
        ).scalar_one()
    assert read == stored.evaluation_input


@postgres_only
def test_the_large_columns_are_compressed_with_lz4(engine: Engine) -> None:
    assert compression_of(engine, "evaluation_input") == "l"
    assert compression_of(engine, "receipt") == "l"
    stored = dataclasses.replace(record("large"), evaluation_input=a_large_request())
    assert batch(engine, [(stored, quota(None))]) == [None]
    with engine.connect() as conn:
        method = conn.execute(
            text("SELECT pg_column_compression(evaluation_input) FROM executions")
        ).scalar_one()
    assert method == "lz4"


@postgres_only
def test_a_row_stored_before_the_migration_is_read_after_it(engine: Engine) -> None:
    migrate(engine, "0014", down=True)
    assert compression_of(engine, "evaluation_input") == ""
    before = dataclasses.replace(record("before"), evaluation_input=a_large_request())
    assert batch(engine, [(before, quota(None))]) == [None]
    upgrade(engine)
    with engine.connect() as conn:
        method, read = conn.execute(
            text("SELECT pg_column_compression(evaluation_input), evaluation_input FROM executions")
        ).one()
    assert method == "pglz"  # not rewritten
    assert read == before.evaluation_input


@postgres_only
def test_downgrade_gives_the_columns_the_default_method_back(engine: Engine) -> None:
    migrate(engine, "0014", down=True)
    assert compression_of(engine, "evaluation_input") == ""
    assert compression_of(engine, "receipt") == ""
