"""usage counters for monthly quotas

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_counters",
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("period", sa.String(length=7), nullable=False),
        sa.Column("executes", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.org_id"], name=op.f("fk_usage_counters_org_id_orgs")
        ),
        sa.PrimaryKeyConstraint("org_id", "period", name=op.f("pk_usage_counters")),
    )


def downgrade() -> None:
    op.drop_table("usage_counters")
