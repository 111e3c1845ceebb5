"""Runs keep the fit's state, so the next run resumes from it (warm start).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("state", sa.JSON, nullable=True))
    op.add_column("runs", sa.Column("warm_from", sa.String(36), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("warm_from")
        batch.drop_column("state")
