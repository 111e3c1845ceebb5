"""A worker's side of a campaign: the tasks to answer, and submissions of perturbed reports
(idempotent: a retry with the same key reads the first outcome, never spends twice)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Header, HTTPException
from fastapi.responses import JSONResponse

from ...mechanisms import Accountant
from .. import adaptive, campaigns
from ..bodies import SubmissionIn, SubmissionOut, TaskOut
from ..schema import campaigns as t_campaigns
from ..schema import reports as t_reports
from ..schema import submissions as t_submissions
from ..schema import tasks as t_tasks
from ..schema import workers as t_workers
from ._deps import Auth, Engine, MaxEpsilon, campaign_row, now, worker

router = APIRouter()


@router.get("/campaigns/{campaign_id}/tasks", response_model=list[TaskOut])
def list_tasks(campaign_id: str, engine: Engine, authorization: Auth = None) -> list[TaskOut]:
    """The tasks to answer: all of them, or under adaptive redundancy those of the least
    settled that this worker has not answered, most needed first (none once every task is
    settled or capped, or the answer budget is spent)."""
    with engine.connect() as conn:
        row = campaign_row(conn, campaign_id)
        who = worker(conn, campaign_id, authorization)
        if row.adaptive is not None:
            mech = campaigns.rebuild(row.mechanism, row.mechanism_params)
            picked = adaptive.next_tasks(conn, row, mech, who.id)
            found = {
                r.position: r
                for r in conn.execute(
                    sa.select(t_tasks.c.position, t_tasks.c.key, t_tasks.c.text).where(
                        t_tasks.c.campaign_id == campaign_id,
                        t_tasks.c.position.in_(picked),
                    )
                )
            }
            return [TaskOut(key=found[p].key, text=found[p].text) for p in picked]
        rows = conn.execute(
            sa.select(t_tasks.c.key, t_tasks.c.text)
            .where(t_tasks.c.campaign_id == campaign_id)
            .order_by(t_tasks.c.position)
        ).all()
    return [TaskOut(key=r.key, text=r.text) for r in rows]


@router.post(
    "/campaigns/{campaign_id}/submissions",
    status_code=201,
    response_model=SubmissionOut,
    responses={200: {"model": SubmissionOut, "description": "A replay of an earlier key."}},
)
def submit(
    campaign_id: str,
    body: SubmissionIn,
    engine: Engine,
    max_epsilon: MaxEpsilon,
    authorization: Auth = None,
    idempotency_key: Annotated[str | None, Header(max_length=100)] = None,
) -> Any:
    if not idempotency_key:
        raise HTTPException(400, "Send an 'Idempotency-Key' header (1-100 characters).")
    digest = hashlib.sha256(json.dumps(body.model_dump(), sort_keys=True).encode()).hexdigest()
    with engine.connect() as conn:
        stored = conn.execute(
            sa.select(t_campaigns.c.mechanism, t_campaigns.c.mechanism_params).where(
                t_campaigns.c.id == campaign_id
            )
        ).first()
    if stored is not None:
        # Two-layer's figures for a large release take seconds: computed (and cached)
        # here, before the transaction, which holds the database's write lock.
        campaigns.figures(campaigns.rebuild(*stored), len(body.reports))
    with engine.begin() as conn:
        row = campaign_row(conn, campaign_id)
        who = worker(conn, campaign_id, authorization)
        earlier = conn.execute(
            sa.select(t_submissions).where(
                t_submissions.c.worker_id == who.id,
                t_submissions.c.idempotency_key == idempotency_key,
            )
        ).first()
        if earlier is not None:
            return _replay(earlier, digest, who)
        mech = campaigns.rebuild(row.mechanism, row.mechanism_params)
        if body.mechanism.name != row.mechanism or not _same_params(
            body.mechanism.params, row.mechanism_params
        ):
            raise HTTPException(
                409,
                "The reports were perturbed with other parameters than the campaign's; "
                "fetch them again (GET /campaigns/ID).",
            )
        positions = dict(
            conn.execute(
                sa.select(t_tasks.c.key, t_tasks.c.position).where(
                    t_tasks.c.campaign_id == campaign_id
                )
            ).all()
        )
        keys = [r.task for r in body.reports]
        unknown = [k for k in keys if k not in positions]
        if unknown:
            raise HTTPException(422, f"Unknown task(s) {unknown[:3]} in this campaign.")
        if len(set(keys)) != len(keys):
            raise HTTPException(422, "A submission names a task more than once.")
        if campaigns.whole_row(mech) and len(keys) != len(positions):
            raise HTTPException(
                422,
                f"{mech.name} releases the whole row: report every one of the "
                f"{len(positions)} tasks (null where the output is NULL) in one submission.",
            )
        done = set(
            conn.execute(
                sa.select(t_reports.c.task_position).where(
                    t_reports.c.campaign_id == campaign_id, t_reports.c.worker_id == who.id
                )
            ).scalars()
        )
        again = [k for k in keys if positions[k] in done]
        if again:
            raise HTTPException(
                409, f"Task(s) {again[:3]} already reported by this worker; each once only."
            )
        cap = row.max_answers_per_worker
        if cap is not None and len(done) + len(keys) > cap:
            left = max(cap - len(done), 0)
            raise HTTPException(
                409,
                f"This campaign takes at most {cap} answers per worker; this worker sent "
                f"{len(done)}, so send at most {left} more, not {len(keys)}.",
            )
        values = campaigns.encode_values(mech, row.labels, [r.value for r in body.reports])
        # An honest device draws afresh for each submission: its reports are one release
        # under one draw. Per answer given the others of that draw, within the server's
        # ceiling (a campaign made before it, or under a laxer one, takes nothing past it);
        # the whole release is what the worker's budget is charged.
        _, epsilon = campaigns.check_release(mech, len(keys), max_epsilon)
        account = Accountant(row.budget_epsilon, spent_epsilon=who.spent_epsilon)
        spent, _ = account.after(epsilon)
        if not account.allows(epsilon):
            raise HTTPException(
                409,
                f"These {len(keys)} reports cost epsilon {epsilon:.6g} for all {len(keys)} "
                f"together and would take the worker to {spent:.6g}, past the campaign's "
                f"budget of {row.budget_epsilon:g}.",
            )
        submission_id = str(uuid.uuid4())
        try:
            with conn.begin_nested():
                conn.execute(
                    t_submissions.insert().values(
                        id=submission_id,
                        campaign_id=campaign_id,
                        worker_id=who.id,
                        idempotency_key=idempotency_key,
                        body_hash=digest,
                        n_reports=len(keys),
                        epsilon=epsilon,
                        received_at=now(),
                    )
                )
                conn.execute(
                    t_reports.insert(),
                    [
                        {
                            "campaign_id": campaign_id,
                            "task_position": positions[k],
                            "worker_id": who.id,
                            "submission_id": submission_id,
                            "value": v,
                        }
                        for k, v in zip(keys, values, strict=True)
                    ],
                )
                updated = conn.execute(
                    t_workers.update()
                    .where(
                        t_workers.c.id == who.id,
                        t_workers.c.spent_epsilon == who.spent_epsilon,
                    )
                    .values(spent_epsilon=spent)
                )
                if updated.rowcount != 1:
                    raise _Retry
        except (sa.exc.IntegrityError, _Retry):
            # A concurrent submission of this worker won a race: same key (a retry) or the
            # same task (a duplicate), or it changed the budget.
            raise HTTPException(
                409,
                "A concurrent submission of this worker holds one of these tasks or this "
                "idempotency key; retry with the same key to read its outcome.",
                # Transient, unlike every other 409: clients retry, never drop the body.
                headers={"Retry-After": "1"},
            ) from None
        except sa.exc.DBAPIError as exc:  # pragma: no cover - database gone
            raise HTTPException(503, "Database unavailable; retry with the same key.") from exc
    return _outcome(submission_id, len(keys), epsilon, spent, replayed=False)


class _Retry(Exception):
    pass


def _same_params(sent: dict[str, Any], stored: dict[str, Any]) -> bool:
    if set(sent) != set(stored):
        return False
    for k, v in stored.items():
        w = sent[k]
        if isinstance(v, float) and isinstance(w, int | float) and not isinstance(w, bool):
            if abs(float(w) - v) > 1e-12 * max(1.0, abs(v)):
                return False
        elif w != v:
            return False
    return True


def _replay(earlier: Any, digest: str, who: Any) -> JSONResponse:
    if earlier.body_hash != digest:
        raise HTTPException(
            409, "This idempotency key was used for a different submission; use a new key."
        )
    return _outcome(
        earlier.id, earlier.n_reports, earlier.epsilon, who.spent_epsilon, replayed=True
    )


def _outcome(
    submission_id: str, n_reports: int, epsilon: float, spent: float, *, replayed: bool
) -> JSONResponse:
    """201 for a stored submission, 200 for a replay of one."""
    out = SubmissionOut(
        submission_id=submission_id,
        n_reports=n_reports,
        epsilon=epsilon,
        spent_epsilon=spent,
        replayed=replayed,
    )
    return JSONResponse(out.model_dump(), 200 if replayed else 201)
