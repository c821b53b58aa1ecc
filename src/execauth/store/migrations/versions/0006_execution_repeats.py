"""idempotent repeats as one counted row per execution, not one lineage row per repeat

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "execution_repeats",
        sa.Column("execution_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("repeats", sa.BigInteger(), nullable=False),
        sa.Column("first_repeated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_repeated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("execution_id", name=op.f("pk_execution_repeats")),
    )
    # Repeats recorded before this revision, one lineage row each, become counts. The rows
    # themselves stay: execution_events is append-only (0003); reads skip that kind now.
    op.execute(
        "INSERT INTO execution_repeats "
        "(execution_id, org_id, repeats, first_repeated_at, last_repeated_at) "
        "SELECT execution_id, org_id, count(*), min(occurred_at), max(occurred_at) "
        "FROM execution_events WHERE kind = 'idempotent_repeat' "
        "GROUP BY execution_id, org_id"
    )


def downgrade() -> None:
    op.drop_table("execution_repeats")
