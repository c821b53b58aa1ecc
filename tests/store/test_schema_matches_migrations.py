"""The migrations build the schema the code declares, on every backend.

The code queries through ``store/tables.py`` (and the tables declared beside their
repositories); a serving database is built by the migrations. A table, column or index
declared in one and not the other (added, or dropped as 0011 dropped
``ix_executions_org_time`` and 0012 ``executions.log_index``) would leave queries
written against a schema that is not there, or every receipt paying for an index
nothing declares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, MetaData, inspect

from execauth.store import consumptions
from execauth.store.database import LOG_SCHEMA, log_apart, make_engine, upgrade
from execauth.store.tables import executions, log_checkpoints, log_leaves, log_nodes, metadata
from tests.conftest import Database


@pytest.fixture
def engine(database: Database) -> Iterator[Engine]:
    engine = make_engine(database.url, schema=database.schema)
    upgrade(engine)
    yield engine
    engine.dispose()


def test_the_migrated_tables_columns_and_indexes_are_the_declared_ones(engine: Engine) -> None:
    # Declared beside its repository, on the same metadata: imported above, so compared.
    assert consumptions.receipt_consumptions.name in metadata.tables
    declared, options = metadata, {}
    if log_apart(engine):
        # The log's tables are declared without a schema (queries find them in either
        # file) and migrated into the attached log file: compared there.
        declared, options = MetaData(), {"include_schemas": True}
        in_log = {t.name for t in (log_leaves, log_nodes, log_checkpoints)}
        for table in metadata.tables.values():
            if table.name in in_log:
                table.to_metadata(declared, schema=LOG_SCHEMA)
            else:
                table.to_metadata(declared)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn, opts=options), declared) == []


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)  # their own file: SQLite's
def test_on_sqlite_the_logs_are_in_their_own_file_and_not_in_the_receipts(engine: Engine) -> None:
    assert log_apart(engine)
    logs = {log_leaves.name, log_nodes.name, log_checkpoints.name}
    assert logs <= set(inspect(engine).get_table_names(schema=LOG_SCHEMA))
    assert logs.isdisjoint(inspect(engine).get_table_names())


def test_executions_has_no_index_that_another_one_begins_with(engine: Engine) -> None:
    # A full index whose columns lead another full index serves no query the longer one
    # does not, and costs every receipt an insert.
    full = [
        tuple(index["column_names"])
        for index in inspect(engine).get_indexes(executions.name)
        if not {"sqlite_where", "postgresql_where"} & set(index.get("dialect_options", {}))
    ]
    assert full, "executions has indexes"
    for columns in full:
        longer = [o for o in full if o != columns and o[: len(columns)] == columns]
        assert longer == [], f"{columns} is the start of {longer}"
