"""Alembic environment: always run online on the connection ``store.database.upgrade`` passes."""

from __future__ import annotations

from alembic import context

from execauth.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
