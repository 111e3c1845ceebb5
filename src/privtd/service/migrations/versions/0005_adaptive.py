"""Adaptive redundancy: a campaign may keep the settings with which its task list hands each
worker the least settled tasks. Campaigns made before this revision list every task, as before.

Revision ID: 0005_adaptive
Revises: 0004_tokens
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_adaptive"
down_revision = "0004_tokens"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("campaigns", sa.Column("adaptive", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("adaptive")
