"""Enrolment by invitation: campaigns say whether anyone may enrol and how many workers at
most; the requester's enrolment codes, one worker each. Campaigns made before this revision
become invitation-only (the requester issues codes to let more workers in).

Revision ID: 0003_enrolment
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_enrolment"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "campaigns",
        sa.Column("open_enrolment", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.add_column("campaigns", sa.Column("max_workers", sa.Integer, nullable=True))
    op.create_table(
        "enrolment_codes",
        sa.Column("code_hash", sa.String(64), primary_key=True),
        sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("worker_id", sa.String(36), sa.ForeignKey("workers.id"), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_enrolment_codes_campaign", "enrolment_codes", ["campaign_id"])


def downgrade() -> None:
    op.drop_index("ix_enrolment_codes_campaign", "enrolment_codes")
    op.drop_table("enrolment_codes")
    with op.batch_alter_table("campaigns") as batch:
        batch.drop_column("max_workers")
        batch.drop_column("open_enrolment")
