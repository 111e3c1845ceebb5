"""Making a campaign (the requester): its tasks, its mechanism checked against the server's
ceiling and the workers' default one, and its description as workers read it."""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException

from ...client import DEFAULT_MAX_EPSILON_PER_ANSWER, DEFAULT_MAX_LIFETIME_EPSILON
from .. import adaptive, campaigns
from ..bodies import CampaignIn, CampaignOut, MechanismOut
from ..schema import campaigns as t_campaigns
from ..schema import tasks as t_tasks
from ._deps import Engine, MaxEpsilon, campaign_row, now, requester

router = APIRouter()

OPEN_WARNING = (
    "Open enrolment: anyone who has the campaign's id can enrol, as many identities as they "
    "like (up to max_workers), each with a fresh budget; fake workers can then send any report "
    "in the accepted range. Prefer enrolment codes (docs/service.md)."
)


def describe(conn: sa.Connection, row: Any) -> CampaignOut:
    mech = campaigns.rebuild(row.mechanism, row.mechanism_params)
    n_tasks = conn.execute(
        sa.select(sa.func.count()).select_from(t_tasks).where(t_tasks.c.campaign_id == row.id)
    ).scalar_one()
    g = mech.guarantee
    bounds = campaigns.report_range(mech)
    k = campaigns.answers_per_draw(mech, n_tasks, row.max_answers_per_worker)
    per, whole = campaigns.figures(mech, k)
    return CampaignOut(
        id=row.id,
        name=row.name,
        kind=mech.kind,
        mechanism=MechanismOut(
            name=row.mechanism,
            params=row.mechanism_params,
            epsilon=g.epsilon,
            unit=g.unit,
            guarantee=str(g),
            answers_per_draw=k,
            answer_epsilon=per,
            release_epsilon=whole,
        ),
        labels=row.labels,
        budget=row.budget_epsilon,
        method=row.method,
        n_tasks=n_tasks,
        whole_row=campaigns.whole_row(mech),
        open_enrolment=row.open_enrolment,
        max_workers=row.max_workers,
        max_answers_per_worker=row.max_answers_per_worker,
        report_range=None if bounds is None else list(bounds),
        adaptive=row.adaptive,
        warning=OPEN_WARNING if row.open_enrolment else None,
    )


@router.post("/campaigns", status_code=201, response_model=CampaignOut)
def create_campaign(
    body: CampaignIn,
    engine: Engine,
    max_epsilon: MaxEpsilon,
    requester_id: str = Depends(requester),
) -> CampaignOut:
    mech = campaigns.build_mechanism(body.mechanism, body.epsilon, body.params, body.labels)
    cap = body.max_answers_per_worker
    # Per answer given the worker's others, for a worker who answers every task it may at
    # once; then what that worker spends in all, against the workers' default lifetime
    # ceiling, so a campaign every default worker would be refused in is refused here.
    campaigns.check_campaign_epsilon(
        mech, len(body.tasks), max_epsilon, DEFAULT_MAX_EPSILON_PER_ANSWER, cap
    )
    spend, answerable = campaigns.check_worker_spend(
        mech, len(body.tasks), body.budget, cap, raise_ok=body.workers_raise_ceiling
    )
    campaigns.check_report_range(mech)
    labels = campaigns.check_labels(mech, body.labels)
    method = campaigns.pick_method(mech, body.method)
    settings = None
    if body.adaptive is not None:
        settings = adaptive.check(mech, body.adaptive.model_dump(), len(labels or ()))
    keys = [t.key for t in body.tasks]
    if len(set(keys)) != len(keys):
        raise HTTPException(422, "tasks: task keys must be distinct.")
    campaign_id = str(uuid.uuid4())
    with engine.begin() as conn:
        conn.execute(
            t_campaigns.insert().values(
                id=campaign_id,
                requester_id=requester_id,
                name=body.name,
                mechanism=mech.name,
                mechanism_params=campaigns.public_params(mech),
                labels=labels,
                budget_epsilon=body.budget,
                method=method,
                created_at=now(),
                open_enrolment=body.open_enrolment,
                max_workers=body.max_workers,
                max_answers_per_worker=cap,
                adaptive=settings,
            )
        )
        conn.execute(
            t_tasks.insert(),
            [
                {"campaign_id": campaign_id, "position": i, "key": t.key, "text": t.text}
                for i, t in enumerate(body.tasks)
            ],
        )
        out = describe(conn, campaign_row(conn, campaign_id))
    if spend > DEFAULT_MAX_LIFETIME_EPSILON * (1 + 1e-12):
        raised = (
            f"A worker who answers all {answerable} tasks it may spends epsilon {spend:.4g}, "
            f"past the workers' default ceiling of {DEFAULT_MAX_LIFETIME_EPSILON:g} over all "
            "their campaigns: tell them to raise it ('privtd client ceiling --lifetime X', or "
            "the page's ceiling form), or they stop there."
        )
        out.warning = raised if out.warning is None else f"{out.warning} {raised}"
    return out
