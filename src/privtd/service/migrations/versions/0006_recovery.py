"""A cap on the answers one worker may report in a campaign; workers' recovery codes (hashed),
redeemed for a fresh token of the same worker. Workers enrolled before this revision have no
recovery code.

Revision ID: 0006_recovery
Revises: 0005_adaptive
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_recovery"
down_revision = "0005_adaptive"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("campaigns", sa.Column("max_answers_per_worker", sa.Integer, nullable=True))
    op.add_column("workers", sa.Column("recovery_hash", sa.String(64), nullable=True))
    op.create_index("ix_workers_recovery", "workers", ["recovery_hash"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_workers_recovery", "workers")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("recovery_hash")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("max_answers_per_worker")
