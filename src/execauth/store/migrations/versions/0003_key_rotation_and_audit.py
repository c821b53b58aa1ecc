"""API key rotation grace, the audit trail, execution lineage

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

APPEND_ONLY = ("audit_events", "execution_events")


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("previous_secret_hash", sa.String(64), nullable=True))
    op.add_column(
        "api_keys", sa.Column("previous_valid_until", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("api_keys", sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(op.f("ix_api_keys_previous_secret_hash"), "api_keys", ["previous_secret_hash"])
    op.create_table(
        "audit_events",
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(64), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_audit_events")),
    )
    op.create_index("ix_audit_events_org_time", "audit_events", ["org_id", "occurred_at"])
    op.create_table(
        "execution_events",
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_execution_events")),
    )
    op.create_index(
        "ix_execution_events_execution", "execution_events", ["execution_id", "occurred_at"]
    )
    op.create_index(
        "ix_executions_org_decided", "executions", ["org_id", "decided_at_ms", "execution_id"]
    )
    _forbid_changes(APPEND_ONLY)


def _forbid_changes(tables: tuple[str, ...]) -> None:
    """Append-only in the database itself, not just by convention of the code."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION execauth_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$"
        )
        for table in tables:
            op.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION execauth_append_only()"
            )
        return
    for table in tables:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
            )


def downgrade() -> None:
    op.drop_index("ix_executions_org_decided", "executions")
    op.drop_table("execution_events")
    op.drop_table("audit_events")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION execauth_append_only()")
    op.drop_index(op.f("ix_api_keys_previous_secret_hash"), "api_keys")
    op.drop_column("api_keys", "rotated_at")
    op.drop_column("api_keys", "previous_valid_until")
    op.drop_column("api_keys", "previous_secret_hash")
