"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "orgs",
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("plan", sa.String(length=64), nullable=False),
        sa.Column("wire_profile", sa.String(length=1), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("org_id", name=op.f("pk_orgs")),
    )
    op.create_table(
        "service_settings",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_service_settings")),
    )
    op.create_table(
        "signing_keys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.LargeBinary(), nullable=False),
        sa.Column("sealed_private_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_signing_keys")),
    )
    op.create_table(
        "api_keys",
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("surfaces", sa.Text(), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.org_id"], name=op.f("fk_api_keys_org_id_orgs")),
        sa.PrimaryKeyConstraint("key_id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_api_keys_secret_hash")),
    )
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_keys_org_id"), ["org_id"], unique=False)

    op.create_table(
        "executions",
        sa.Column("execution_id", sa.String(length=64), nullable=False),
        sa.Column("receipt_id", sa.String(length=64), nullable=False),
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_digest", sa.String(length=71), nullable=False),
        sa.Column("surface", sa.String(length=128), nullable=False),
        sa.Column("actor", sa.String(length=256), nullable=True),
        sa.Column("decision", sa.String(length=8), nullable=False),
        sa.Column("policy_id", sa.String(length=64), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=False),
        sa.Column("rule_id", sa.String(length=64), nullable=True),
        sa.Column("reason", sa.String(length=96), nullable=True),
        sa.Column("decided_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("evaluation_input", sa.Text(), nullable=False),
        sa.Column("receipt", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.org_id"], name=op.f("fk_executions_org_id_orgs")
        ),
        sa.PrimaryKeyConstraint("execution_id", name=op.f("pk_executions")),
        sa.UniqueConstraint(
            "org_id", "idempotency_key", name=op.f("uq_executions_org_id_idempotency_key")
        ),
        sa.UniqueConstraint("receipt_id", name=op.f("uq_executions_receipt_id")),
    )
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.create_index("ix_executions_org_time", ["org_id", "decided_at_ms"], unique=False)

    op.create_table(
        "policies",
        sa.Column("org_id", sa.String(length=64), nullable=False),
        sa.Column("policy_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("policy_hash", sa.String(length=71), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.org_id"], name=op.f("fk_policies_org_id_orgs")),
        sa.PrimaryKeyConstraint("org_id", "policy_id", "version", name=op.f("pk_policies")),
    )


def downgrade() -> None:

    op.drop_table("policies")
    with op.batch_alter_table("executions", schema=None) as batch_op:
        batch_op.drop_index("ix_executions_org_time")

    op.drop_table("executions")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_keys_org_id"))

    op.drop_table("api_keys")
    op.drop_table("signing_keys")
    op.drop_table("service_settings")
    op.drop_table("orgs")
