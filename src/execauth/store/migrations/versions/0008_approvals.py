"""human approval: approvals (one per ESCALATE execution) and their votes

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("approval_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("execution_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome_execution_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("approval_id", name=op.f("pk_approvals")),
        sa.UniqueConstraint("execution_id", name=op.f("uq_approvals_execution_id")),
    )
    op.create_index("ix_approvals_org_state", "approvals", ["org_id", "state"])
    op.create_table(
        "approval_votes",
        sa.Column("approval_id", sa.String(length=64), nullable=False),
        sa.Column("approver_key_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("vote", sa.String(length=8), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("voted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("approval_id", "approver_key_id", name=op.f("pk_approval_votes")),
    )


def downgrade() -> None:
    op.drop_table("approval_votes")
    op.drop_index("ix_approvals_org_state", table_name="approvals")
    op.drop_table("approvals")
