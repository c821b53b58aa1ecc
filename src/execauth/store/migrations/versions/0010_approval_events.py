"""approval events: a subscription's event-type filter; the escalations the expiry sweep walks

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # JSON list of event types; NULL delivers every event, as every subscription did before.
    op.add_column("subscriptions", sa.Column("event_types", sa.Text(), nullable=True))
    # Only the ESCALATE executions: the sweep finds unsettled approvals without reading
    # the whole executions table on every pass.
    op.create_index(
        "ix_executions_escalations",
        "executions",
        ["decided_at_ms", "execution_id"],
        sqlite_where=sa.text("decision = 'ESCALATE'"),
        postgresql_where=sa.text("decision = 'ESCALATE'"),
    )


def downgrade() -> None:
    op.drop_index("ix_executions_escalations", table_name="executions")
    with op.batch_alter_table("subscriptions") as batch_op:
        batch_op.drop_column("event_types")
