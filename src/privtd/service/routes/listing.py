"""What a requester reads back: its campaigns, a campaign's aggregation runs, and the
campaign's perturbed reports as CSV (streamed, and cut short if the token stops working)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse
from starlette.types import Send

from .. import campaigns, requesters
from ..bodies import CampaignSummary, RunOut
from ..schema import campaigns as t_campaigns
from ..schema import reports as t_reports
from ..schema import runs as t_runs
from ..schema import tasks as t_tasks
from ..schema import workers as t_workers
from ._deps import Engine, owned, requester, requester_token, utc
from .runs import run_out

router = APIRouter()


@router.get("/campaigns", response_model=list[CampaignSummary])
def list_campaigns(engine: Engine, requester_id: str = Depends(requester)) -> list[CampaignSummary]:
    """The campaigns of the requester whose token is sent (no one else's), oldest first."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(t_campaigns)
            .where(t_campaigns.c.requester_id == requester_id)
            .order_by(t_campaigns.c.created_at, t_campaigns.c.id)
        ).all()
        # The requester's campaign ids as a subquery: no list of ids sent back to the database.
        ids = sa.select(t_campaigns.c.id).where(t_campaigns.c.requester_id == requester_id)
        workers = _counts(conn, t_workers.c.campaign_id, ids)
        reports = _counts(conn, t_reports.c.campaign_id, ids)
        n_tasks = _counts(conn, t_tasks.c.campaign_id, ids)
        newest: dict[str, str] = {}
        for campaign_id, status in conn.execute(
            sa.select(t_runs.c.campaign_id, t_runs.c.status)
            .where(t_runs.c.campaign_id.in_(ids))
            .order_by(t_runs.c.created_at)
        ):
            newest[campaign_id] = status  # the last one seen is the newest
    out = []
    for r in rows:
        mech = campaigns.rebuild(r.mechanism, r.mechanism_params)
        g = mech.guarantee
        k = campaigns.answers_per_draw(mech, n_tasks.get(r.id, 0), r.max_answers_per_worker)
        per, whole = campaigns.figures(mech, k)
        out.append(
            CampaignSummary(
                id=r.id,
                name=r.name,
                mechanism=r.mechanism,
                epsilon=g.epsilon,
                unit=g.unit,
                answers_per_draw=k,
                answer_epsilon=per,
                release_epsilon=whole,
                budget=r.budget_epsilon,
                method=r.method,
                created_at=utc(r.created_at),
                workers=workers.get(r.id, 0),
                reports=reports.get(r.id, 0),
                state=RUN_STATE.get(newest.get(r.id, ""), "collecting"),
            )
        )
    return out


@router.get("/campaigns/{campaign_id}/runs", response_model=list[RunOut])
def list_runs(
    campaign_id: str, engine: Engine, requester_id: str = Depends(requester)
) -> list[RunOut]:
    """The campaign's aggregation runs, oldest first."""
    with engine.connect() as conn:
        owned(conn, campaign_id, requester_id)
        rows = conn.execute(
            sa.select(t_runs)
            .where(t_runs.c.campaign_id == campaign_id)
            .order_by(t_runs.c.created_at, t_runs.c.id)
        ).all()
    return [run_out(r) for r in rows]


@router.get(
    "/campaigns/{campaign_id}/reports",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/csv": {}}, "description": "task,worker,answer"}},
)
def export_reports(
    campaign_id: str, engine: Engine, who: tuple[str, str] = Depends(requester_token)
) -> Any:
    """The campaign's perturbed reports as CSV (task,worker,answer; an empty answer is a
    NULL report): what the workers' devices sent, never a raw answer. Workers are named as
    they enrolled, as in the results. If the token is revoked or replaced during the
    download, the download stops there, without its end (an incomplete chunked body)."""
    requester_id, digest = who
    with engine.connect() as conn:
        row = owned(conn, campaign_id, requester_id)
    return _Revocable(
        _report_lines(engine, row, digest),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{campaign_id}.csv"'},
    )


#: A campaign's state in the list, from its newest run's status (none: "collecting").
RUN_STATE = {
    "queued": "aggregating",
    "running": "aggregating",
    "done": "aggregated",
    "failed": "failed",
}


def _counts(conn: sa.Connection, column: Any, ids: Any) -> dict[str, int]:
    """Rows per campaign id in ``column``'s table (ids: a subquery), one grouped query."""
    query = sa.select(column, sa.func.count()).where(column.in_(ids)).group_by(column)
    return {str(k): int(n) for k, n in conn.execute(query)}


#: Reports per chunk of the CSV export: a campaign's reports are never all in memory.
EXPORT_CHUNK = 10_000


def _report_lines(engine: sa.Engine, campaign: Any, digest: str) -> Iterator[str]:
    """The campaign's reports as CSV text, chunk by chunk, labels and task keys decoded; raises
    :class:`_Stale` before a chunk if the requester token hashed ``digest`` stopped working."""
    import numpy as np
    import pandas as pd

    from ..._csv import to_csv

    mech = campaigns.rebuild(campaign.mechanism, campaign.mechanism_params)
    labels = campaign.labels if mech.kind == "categorical" else None
    integral = campaigns.integer_reports(mech)
    with engine.connect() as conn:
        # Positions run 0..n_tasks-1 (the order the campaign listed its tasks in).
        keys = pd.Series(
            dict(
                conn.execute(
                    sa.select(t_tasks.c.position, t_tasks.c.key).where(
                        t_tasks.c.campaign_id == campaign.id
                    )
                ).all()
            )
        ).sort_index()
        names = pd.Series(
            dict(
                conn.execute(
                    sa.select(t_workers.c.id, t_workers.c.name).where(
                        t_workers.c.campaign_id == campaign.id
                    )
                ).all()
            ),
            dtype=object,
        )
        conn.commit()
        yield "task,worker,answer\n"
        query = (
            sa.select(t_reports.c.task_position, t_reports.c.worker_id, t_reports.c.value)
            .where(t_reports.c.campaign_id == campaign.id)
            .order_by(t_reports.c.task_position, t_reports.c.worker_id)
            .limit(EXPORT_CHUNK)
        )
        after: tuple[int, str] | None = None
        while True:
            # Page by the primary key, each page one short query: no cursor held open across
            # the whole download. The driver's plain tuples, decoded a page at a time.
            page = query
            if after is not None:
                # SQLite and PostgreSQL both seek the primary key's index to this row (the
                # campaign's equality, then the row comparison), not scan from the top.
                page = page.where(
                    sa.tuple_(t_reports.c.task_position, t_reports.c.worker_id) > sa.tuple_(*after)
                )
            result = conn.execute(page)
            rows = result.cursor.fetchall()
            result.close()
            # No transaction stays open while a page is decoded or sent: one held across the
            # download would read a single snapshot, and on SQLite hold the write lock, so a
            # revocation would wait for the download to end instead of stopping it.
            conn.commit()
            if not rows:
                break
            after = (rows[-1][0], rows[-1][1])
            chunk = pd.DataFrame(rows, columns=["task", "worker", "value"])
            value = chunk["value"].astype(float)
            # A NULL report stays empty: None, pandas' NA or NaN are all written as "".
            shown: Any
            if labels is not None:
                shown = np.full(len(value), None, dtype=object)
                present = value.notna().to_numpy()
                shown[present] = np.asarray(labels, dtype=object)[
                    value[present].to_numpy(dtype=np.int64)
                ]
            elif integral:
                shown = value.astype("Int64").array
            else:
                shown = value.to_numpy()
            frame = pd.DataFrame(
                {
                    "task": keys.to_numpy()[chunk["task"].to_numpy(dtype=np.int64)],
                    "worker": names.reindex(chunk["worker"]).to_numpy(),
                    "value": shown,
                }
            )
            # Task keys, worker names and labels are escaped against spreadsheet formulas.
            text = to_csv(frame, index=False, header=False, lineterminator="\n")
            # Checked, in a transaction of its own, before each page leaves: once the token is
            # revoked or replaced, nothing more is sent (what the network already carries
            # still arrives).
            if not requesters.valid(conn, digest):
                raise _Stale
            conn.commit()
            yield text


class _Stale(Exception):
    """Raised in a streamed answer when the token it was authenticated with stops working."""


class _Revocable(StreamingResponse):
    """A streamed answer cut short when its requester token stops working: the connection is
    closed without the body's last chunk, so the client sees a download that failed (never a
    complete-looking file that holds only part of the reports)."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except _Stale:
            return  # the server closes the connection: the answer never completes
