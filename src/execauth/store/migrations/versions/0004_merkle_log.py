"""per-organization Merkle log: leaves, complete subtree nodes, signed checkpoints

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("executions", sa.Column("log_index", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_executions_unsequenced",
        "executions",
        ["decided_at_ms", "execution_id"],
        sqlite_where=sa.text("log_index IS NULL"),
        postgresql_where=sa.text("log_index IS NULL"),
    )
    op.create_table(
        "log_leaves",
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("log_index", sa.BigInteger(), nullable=False),
        sa.Column("execution_id", sa.String(64), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(), nullable=False),
        sa.Column("sequenced_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "log_index", name=op.f("pk_log_leaves")),
        sa.UniqueConstraint("execution_id", name=op.f("uq_log_leaves_execution_id")),
    )
    op.create_table(
        "log_nodes",
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("node_index", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "level", "node_index", name=op.f("pk_log_nodes")),
    )
    op.create_table(
        "log_checkpoints",
        sa.Column("org_id", sa.String(64), nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("org_id", "tree_size", name=op.f("pk_log_checkpoints")),
    )
    for table in ("log_leaves", "log_nodes", "log_checkpoints"):
        _forbid_changes(table)


def _forbid_changes(table: str) -> None:
    """The log is append-only in the database too (the function comes from 0003)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION execauth_append_only()"
        )
        return
    for verb in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{table} is append-only'); END"
        )


def downgrade() -> None:
    op.drop_table("log_checkpoints")
    op.drop_table("log_nodes")
    op.drop_table("log_leaves")
    op.drop_index("ix_executions_unsequenced", "executions")
    op.drop_column("executions", "log_index")
