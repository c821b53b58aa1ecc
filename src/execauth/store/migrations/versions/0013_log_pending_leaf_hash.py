"""log_pending.leaf_hash: each queued receipt's Merkle leaf, taken where it was signed

The sequencer recomputed every leaf from the stored receipt (read the row, decode the
JSON, canonicalize it, hash it): on SQLite about a third of a pass, which holds the
write lock every receipt batch waits for, and on PostgreSQL a read of each whole row.
The gateway that signs a receipt holds the exact bytes its signature covers; the leaf
is their hash, queued with the receipt (docs/decisions.md, "The leaf from the signer").
Receipts queued before this revision have none (NULL): the sequencer computes theirs
from the stored receipt, as before.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("log_pending", sa.Column("leaf_hash", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("log_pending") as batch:
        batch.drop_column("leaf_hash")
