"""receipts used once: one consumption row per receipt, append-only

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLE = "receipt_consumptions"


def upgrade() -> None:
    op.create_table(
        TABLE,
        # The primary key is the whole guarantee: a second consumption of a receipt cannot
        # be committed, whichever instance tries, whatever either of them read before.
        sa.Column("receipt_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("execution_id", sa.String(length=64), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("receipt_id", name=op.f("pk_receipt_consumptions")),
    )
    op.create_index("ix_receipt_consumptions_org_time", TABLE, ["org_id", "consumed_at"])
    # Append-only like the audit trail (0003): deleting a row would make a used receipt
    # usable again, so the database refuses it, not just the code.
    if op.get_bind().dialect.name == "postgresql":
        # execauth_append_only() exists since 0003.
        op.execute(
            f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION execauth_append_only()"
        )
        return
    for verb in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER {TABLE}_no_{verb.lower()} BEFORE {verb} ON {TABLE} "
            f"BEGIN SELECT RAISE(ABORT, '{TABLE} is append-only'); END"
        )


def downgrade() -> None:
    op.drop_index("ix_receipt_consumptions_org_time", table_name=TABLE)
    op.drop_table(TABLE)
