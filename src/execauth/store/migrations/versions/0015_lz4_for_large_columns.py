"""PostgreSQL: the large columns of ``executions`` compressed with LZ4 instead of pglz

A receipt row's ``evaluation_input`` holds the request as it was decided (up to the
64 KiB body limit), and PostgreSQL compresses a value that would make its row longer
than about 2 KiB before it stores it. With its default method, pglz, storing requests
of 60 KiB cost the database's backend about twice the CPU that LZ4 costs, for
about the same bytes stored (docs/decisions.md, "LZ4 for the receipts' large columns on
PostgreSQL"). Only values stored from now on are compressed with LZ4: the rows already
there keep pglz, and PostgreSQL reads either, value by value. Nothing is rewritten, but
the change to the catalog takes the table's exclusive lock: it waits for transactions
using ``executions`` to end (docs/operations.md, "Migrations").

A server that does not offer LZ4 (built without it) keeps pglz: the revision asks the
server. SQLite does not compress values: nothing to do there.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Connection

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COLUMNS = ("evaluation_input", "receipt")


def upgrade() -> None:
    _compress_with("lz4")


def downgrade() -> None:
    _compress_with("DEFAULT")  # the server's default_toast_compression, as before


def _compress_with(method: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not _offers_lz4(bind):
        return
    changes = ", ".join(f"ALTER COLUMN {column} SET COMPRESSION {method}" for column in COLUMNS)
    op.execute(f"ALTER TABLE executions {changes}")


def _offers_lz4(bind: Connection) -> bool:
    # default_toast_compression's values are the methods this server was built with.
    offered = bind.exec_driver_sql(
        "SELECT enumvals FROM pg_settings WHERE name = 'default_toast_compression'"
    ).scalar()
    return offered is not None and "lz4" in offered
