"""executions: drop ix_executions_org_time, a prefix of ix_executions_org_decided

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # (org_id, decided_at_ms) is the leading part of (org_id, decided_at_ms, execution_id):
    # every query it served is served by the longer one, and every receipt paid for both.
    op.drop_index("ix_executions_org_time", table_name="executions")


def downgrade() -> None:
    op.create_index("ix_executions_org_time", "executions", ["org_id", "decided_at_ms"])
