"""Initial schema: requesters, campaigns, tasks, workers, submissions, reports, runs.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID = sa.String(36)
WHEN = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "requesters",
        sa.Column("id", ID, primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", WHEN, nullable=False),
    )
    op.create_table(
        "campaigns",
        sa.Column("id", ID, primary_key=True),
        sa.Column("requester_id", ID, sa.ForeignKey("requesters.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("mechanism", sa.String(32), nullable=False),
        sa.Column("mechanism_params", sa.JSON, nullable=False),
        sa.Column("labels", sa.JSON, nullable=True),
        sa.Column("budget_epsilon", sa.Float, nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("campaign_id", ID, sa.ForeignKey("campaigns.id"), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.UniqueConstraint("campaign_id", "key", name="uq_tasks_key"),
    )
    op.create_table(
        "workers",
        sa.Column("id", ID, primary_key=True),
        sa.Column("campaign_id", ID, sa.ForeignKey("campaigns.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("spent_epsilon", sa.Float, nullable=False),
        sa.Column("enrolled_at", WHEN, nullable=False),
        sa.UniqueConstraint("campaign_id", "name", name="uq_workers_name"),
    )
    op.create_index("ix_workers_campaign", "workers", ["campaign_id"])
    op.create_table(
        "submissions",
        sa.Column("id", ID, primary_key=True),
        sa.Column("campaign_id", ID, sa.ForeignKey("campaigns.id"), nullable=False),
        sa.Column("worker_id", ID, sa.ForeignKey("workers.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(100), nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("n_reports", sa.Integer, nullable=False),
        sa.Column("epsilon", sa.Float, nullable=False),
        sa.Column("received_at", WHEN, nullable=False),
        sa.UniqueConstraint("worker_id", "idempotency_key", name="uq_submissions_key"),
    )
    op.create_table(
        "reports",
        sa.Column("campaign_id", ID, sa.ForeignKey("campaigns.id"), primary_key=True),
        sa.Column("task_position", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("worker_id", ID, sa.ForeignKey("workers.id"), primary_key=True),
        sa.Column("submission_id", ID, sa.ForeignKey("submissions.id"), nullable=False),
        sa.Column("value", sa.Float, nullable=True),
    )
    op.create_table(
        "runs",
        sa.Column("id", ID, primary_key=True),
        sa.Column("campaign_id", ID, sa.ForeignKey("campaigns.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("n_reports", sa.Integer, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("max_iter", sa.Integer, nullable=False),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("finished_at", WHEN, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("result", sa.JSON, nullable=True),
    )
    op.create_index("ix_runs_campaign", "runs", ["campaign_id", "created_at"])


def downgrade() -> None:
    for table in ("runs", "reports", "submissions", "workers", "tasks", "campaigns", "requesters"):
        op.drop_table(table)
