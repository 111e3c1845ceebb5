"""Aggregation runs: started by the requester (the campaign's estimator over its reports, in the
background), followed, and the newest finished run's results."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException

from ..bodies import RunOut
from ..schema import runs as t_runs
from ._deps import Engine, Runner, owned, requester, utc

router = APIRouter()


@router.post("/campaigns/{campaign_id}/runs", status_code=202, response_model=RunOut)
def start_run(
    campaign_id: str, engine: Engine, runner: Runner, requester_id: str = Depends(requester)
) -> RunOut:
    with engine.begin() as conn:
        row = owned(conn, campaign_id, requester_id)
    run_id = runner.start(row)
    return _run(engine, campaign_id, run_id)


@router.get("/campaigns/{campaign_id}/runs/{run_id}", response_model=RunOut)
def get_run(
    campaign_id: str, run_id: str, engine: Engine, requester_id: str = Depends(requester)
) -> RunOut:
    with engine.connect() as conn:
        owned(conn, campaign_id, requester_id)
    return _run(engine, campaign_id, run_id)


@router.get("/campaigns/{campaign_id}/results")
def results(
    campaign_id: str, engine: Engine, requester_id: str = Depends(requester)
) -> dict[str, Any]:
    """The newest finished run's truths, confidence, worker quality and privacy report."""
    with engine.connect() as conn:
        owned(conn, campaign_id, requester_id)
        row = conn.execute(
            sa.select(t_runs)
            .where(t_runs.c.campaign_id == campaign_id, t_runs.c.status == "done")
            .order_by(t_runs.c.created_at.desc())
            .limit(1)
        ).first()
    if row is None:
        raise HTTPException(404, "No finished aggregation run yet: POST .../runs first.")
    return {"run_id": row.id, **row.result}


def _run(engine: sa.Engine, campaign_id: str, run_id: str) -> RunOut:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(t_runs).where(t_runs.c.id == run_id, t_runs.c.campaign_id == campaign_id)
        ).first()
    if row is None:
        raise HTTPException(404, f"No run {run_id!r} in this campaign.")
    return run_out(row)


def run_out(row: Any) -> RunOut:
    return RunOut(
        run_id=row.id,
        status=row.status,
        method=row.method,
        n_reports=row.n_reports,
        iteration=row.iteration,
        max_iter=row.max_iter,
        error=row.error,
        warm_start_from=row.warm_from,
        started_at=utc(row.created_at),
        finished_at=utc(row.finished_at),
    )
