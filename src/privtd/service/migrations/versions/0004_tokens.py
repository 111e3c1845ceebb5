"""Requester tokens can be revoked: a revoked token no longer authenticates.

Revision ID: 0004_tokens
Revises: 0003_enrolment
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_tokens"
down_revision = "0003_enrolment"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("requesters", sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("requesters") as batch:
        batch.drop_column("revoked_at")
