"""A worker's recovery: a lost token replaced by redeeming the recovery code shown at
enrolment (the same worker, never a fresh budget), and a new recovery code on request."""

from __future__ import annotations

import hmac
import math

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Request

from .. import db, recovery
from ..bodies import RecoverIn, RecoverOut, RecoveryCodeOut
from ..schema import campaigns as t_campaigns
from ..schema import reports as t_reports
from ..schema import workers as t_workers
from ._deps import Auth, Engine, worker

router = APIRouter()


@router.post("/campaigns/{campaign_id}/recovery", response_model=RecoverOut)
def recover(campaign_id: str, body: RecoverIn, request: Request, engine: Engine) -> RecoverOut:
    """Bind the worker whose recovery code is sent to the new token and next code the
    request carries: the same worker (name, reports, spent epsilon), never a fresh budget.
    The code works once, and the worker's previous token stops working. A retry with the
    same body (its answer lost) is answered again. Every wrong code gets the same answer;
    past recovery.MAX_FAILURES of them in recovery.WINDOW_S seconds, a client address is
    refused (429) whatever it sends."""
    limit: recovery.FailureLimit = request.app.state.recovery_limit
    client = request.client.host if request.client else ""
    wait = limit.retry_after(client)
    if wait > 0:
        raise HTTPException(
            429,
            "Too many wrong recovery codes from this address; wait and try again with the "
            "code you were shown at enrolment.",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    if len({body.code, body.token, body.next_code}) != 3:
        raise HTTPException(422, "code, token and next_code must differ; draw fresh ones.")
    digest = db.token_hash(body.code)
    token_digest = db.token_hash(body.token)
    next_digest = db.token_hash(body.next_code)
    with engine.begin() as conn:
        found = conn.execute(
            sa.select(t_workers).where(t_workers.c.recovery_hash == digest)
        ).first()
        # Looked up by the code's hash, then compared in constant time: what the timing
        # of a wrong code tells is about the hash of what was sent, never a stored code.
        # Unknown, used and other campaigns' codes are refused alike.
        if (
            found is not None
            and found.campaign_id == campaign_id
            and hmac.compare_digest(str(found.recovery_hash), digest)
        ):
            try:
                with conn.begin_nested():
                    # Conditioned on the code still being this one: of two concurrent
                    # redemptions of one code, one wins.
                    updated = conn.execute(
                        t_workers.update()
                        .where(t_workers.c.id == found.id, t_workers.c.recovery_hash == digest)
                        .values(token_hash=token_digest, recovery_hash=next_digest)
                    ).rowcount
            except sa.exc.IntegrityError:
                raise HTTPException(
                    409, "This token or next code is taken; draw fresh ones."
                ) from None
            replayed = False
        else:
            # A retry of a recovery done: the worker already holds this token and code.
            found = conn.execute(
                sa.select(t_workers).where(t_workers.c.token_hash == token_digest)
            ).first()
            updated = int(
                found is not None
                and found.campaign_id == campaign_id
                and hmac.compare_digest(str(found.recovery_hash), next_digest)
            )
            replayed = True
        if updated != 1 or found is None:
            limit.fail(client)
            raise HTTPException(403, "Unknown or used recovery code for this campaign.")
        budget = conn.execute(
            sa.select(t_campaigns.c.budget_epsilon).where(t_campaigns.c.id == campaign_id)
        ).scalar_one()
        n_reports = conn.execute(
            sa.select(sa.func.count())
            .select_from(t_reports)
            .where(t_reports.c.campaign_id == campaign_id, t_reports.c.worker_id == found.id)
        ).scalar_one()
    return RecoverOut(
        worker_id=found.id,
        name=found.name,
        budget=budget,
        spent_epsilon=found.spent_epsilon,
        n_reports=n_reports,
        replayed=replayed,
    )


@router.post(
    "/campaigns/{campaign_id}/recovery-code", status_code=201, response_model=RecoveryCodeOut
)
def new_recovery_code(
    campaign_id: str, engine: Engine, authorization: Auth = None
) -> RecoveryCodeOut:
    """A new recovery code for the worker whose token is sent (one enrolled before recovery
    codes existed, or whose code may have leaked); its previous code stops working."""
    code, code_digest = db.new_token()
    with engine.begin() as conn:
        who = worker(conn, campaign_id, authorization)
        conn.execute(
            t_workers.update().where(t_workers.c.id == who.id).values(recovery_hash=code_digest)
        )
    return RecoveryCodeOut(recovery_code=code)
