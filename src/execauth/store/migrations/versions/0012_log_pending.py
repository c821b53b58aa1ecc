"""log_pending: the receipts not yet in their log, queued in the transaction that stores them

Until now each receipt's row was rewritten once sequenced (``executions.log_index``, and a
partial index of the rows where it was NULL). On PostgreSQL that rewrite is a new version
of the whole row, receipt included, and of every one of its index entries (the partial
index's predicate names the column, so the update is never HOT). The position is kept in
``log_leaves`` already; the sequencer now finds its work in a small queue that the
writer fills in the transaction that stores each receipt, and empties as it sequences.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_pending",
        sa.Column("decided_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(64), nullable=False),
        # The sequencer's order (oldest first) is the key's: it reads the head of the index.
        sa.PrimaryKeyConstraint("decided_at_ms", "execution_id", name=op.f("pk_log_pending")),
        # SQLite: the rows are the key's b-tree, not a rowid table plus an index of the key.
        sqlite_with_rowid=False,
    )
    op.execute(
        "INSERT INTO log_pending (decided_at_ms, execution_id, org_id)"
        " SELECT decided_at_ms, execution_id, org_id FROM executions WHERE log_index IS NULL"
    )
    op.drop_index("ix_executions_unsequenced", table_name="executions")
    op.drop_column("executions", "log_index")


def downgrade() -> None:
    op.add_column("executions", sa.Column("log_index", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE executions SET log_index = (SELECT log_index FROM log_leaves"
        " WHERE log_leaves.execution_id = executions.execution_id)"
    )
    op.create_index(
        "ix_executions_unsequenced",
        "executions",
        ["decided_at_ms", "execution_id"],
        sqlite_where=sa.text("log_index IS NULL"),
        postgresql_where=sa.text("log_index IS NULL"),
    )
    op.drop_table("log_pending")
