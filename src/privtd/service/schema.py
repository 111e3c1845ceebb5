"""The service's tables (SQLAlchemy Core). Migrations in ``migrations/`` create and change them.

There is no column for a raw answer: a report's ``value`` is what the worker's device sent after
perturbing (a label code, a number, or NULL for a NULL report of P3's mechanisms).
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

requesters = sa.Table(
    "requesters",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # Set when the token is revoked: it no longer authenticates (``privtd requester revoke``).
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
)

campaigns = sa.Table(
    "campaigns",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("requester_id", sa.String(36), sa.ForeignKey("requesters.id"), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    # The public parameters every worker's device perturbs with.
    sa.Column("mechanism", sa.String(32), nullable=False),
    sa.Column("mechanism_params", sa.JSON, nullable=False),
    sa.Column("labels", sa.JSON, nullable=True),
    sa.Column("budget_epsilon", sa.Float, nullable=False),
    sa.Column("method", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # Enrolment: by the requester's codes only, unless the campaign asked for open enrolment;
    # max_workers caps the enrolled workers either way (None: no cap).
    sa.Column("open_enrolment", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("max_workers", sa.Integer, nullable=True),
    # The most answers one worker may report in the campaign (None: every task).
    sa.Column("max_answers_per_worker", sa.Integer, nullable=True),
    # Adaptive redundancy's settings (target, min/max per task, batch, max answers): the task
    # list hands each worker the least settled tasks. None: every worker sees every task.
    sa.Column("adaptive", sa.JSON(none_as_null=True), nullable=True),
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("key", sa.String(200), nullable=False),
    sa.Column("text", sa.Text, nullable=False, default=""),
    sa.UniqueConstraint("campaign_id", "key", name="uq_tasks_key"),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    # What the worker has released so far, composed (the server's copy of the client's budget).
    sa.Column("spent_epsilon", sa.Float, nullable=False, default=0.0),
    sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=False),
    # The SHA-256 hash of the worker's recovery code, shown once at enrolment: redeemed once
    # for a fresh token of this same row (same spent_epsilon), and replaced when redeemed.
    # None for workers enrolled before recovery codes existed.
    sa.Column("recovery_hash", sa.String(64), nullable=True),
    sa.UniqueConstraint("campaign_id", "name", name="uq_workers_name"),
)

enrolment_codes = sa.Table(
    "enrolment_codes",
    metadata,
    # A code admits one worker to one campaign; kept as a SHA-256 hash, like the tokens.
    sa.Column("code_hash", sa.String(64), primary_key=True),
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    # Set once, when the code is used: a code never admits a second worker.
    sa.Column("worker_id", sa.String(36), sa.ForeignKey("workers.id"), nullable=True),
    sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
)

submissions = sa.Table(
    "submissions",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), nullable=False),
    sa.Column("worker_id", sa.String(36), sa.ForeignKey("workers.id"), nullable=False),
    sa.Column("idempotency_key", sa.String(100), nullable=False),
    # A replay with the same key must carry the same body; the hash tells.
    sa.Column("body_hash", sa.String(64), nullable=False),
    sa.Column("n_reports", sa.Integer, nullable=False),
    sa.Column("epsilon", sa.Float, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("worker_id", "idempotency_key", name="uq_submissions_key"),
)

reports = sa.Table(
    "reports",
    metadata,
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), primary_key=True),
    sa.Column("task_position", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("worker_id", sa.String(36), sa.ForeignKey("workers.id"), primary_key=True),
    sa.Column("submission_id", sa.String(36), sa.ForeignKey("submissions.id"), nullable=False),
    sa.Column("value", sa.Float, nullable=True),
)

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(36), primary_key=True),
    sa.Column("campaign_id", sa.String(36), sa.ForeignKey("campaigns.id"), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("method", sa.String(32), nullable=False),
    sa.Column("n_reports", sa.Integer, nullable=False, default=0),
    sa.Column("iteration", sa.Integer, nullable=False, default=0),
    sa.Column("max_iter", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # Truths, confidence, worker quality and the privacy report, as one JSON document.
    sa.Column("result", sa.JSON, nullable=True),
    # The fit's warm_state_, for the next run to resume from, and the run this one resumed.
    # none_as_null: a method without a state stores SQL NULL, not JSON null.
    sa.Column("state", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("warm_from", sa.String(36), nullable=True),
)

sa.Index("ix_runs_campaign", runs.c.campaign_id, runs.c.created_at)
sa.Index("ix_workers_campaign", workers.c.campaign_id)
sa.Index("ix_workers_recovery", workers.c.recovery_hash, unique=True)
sa.Index("ix_enrolment_codes_campaign", enrolment_codes.c.campaign_id)
