"""Joining a campaign: its public description (what a worker's device perturbs with), the
requester's enrolment codes, and a worker's enrolment with one."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter, Depends, HTTPException

from .. import db
from ..bodies import CampaignOut, CodesIn, CodesOut, EnrolIn, EnrolOut
from ..schema import campaigns as t_campaigns
from ..schema import enrolment_codes as t_codes
from ..schema import workers as t_workers
from ._deps import Engine, campaign_row, now, owned, requester
from .campaigns import describe

router = APIRouter()

#: A code that already admitted a worker (status, detail).
USED_CODE = (403, "This enrolment code was already used; each admits one worker.")


@router.get("/campaigns/{campaign_id}", response_model=CampaignOut)
def get_campaign(campaign_id: str, engine: Engine) -> CampaignOut:
    """The campaign's public parameters: what a worker's device perturbs with."""
    with engine.connect() as conn:
        return describe(conn, campaign_row(conn, campaign_id))


@router.post("/campaigns/{campaign_id}/codes", status_code=201, response_model=CodesOut)
def issue_codes(
    campaign_id: str, body: CodesIn, engine: Engine, requester_id: str = Depends(requester)
) -> CodesOut:
    """Enrolment codes: each admits one worker, once; shown here only (stored hashed)."""
    expires = None if body.expires_in_s is None else now() + timedelta(seconds=body.expires_in_s)
    made = [db.new_token() for _ in range(body.count)]
    with engine.begin() as conn:
        owned(conn, campaign_id, requester_id)
        conn.execute(
            t_codes.insert(),
            [
                {
                    "code_hash": digest,
                    "campaign_id": campaign_id,
                    "created_at": now(),
                    "expires_at": expires,
                }
                for _, digest in made
            ],
        )
    return CodesOut(codes=[code for code, _ in made], expires_at=expires)


def invited(conn: sa.Connection, row: Any, code: str | None) -> str | None:
    """The hash of ``code`` if it is an unused, unexpired code of this campaign (None for an
    open campaign enrolled without one); else refuses the enrolment (HTTPException). Reads
    nothing about workers: every refusal is the same whatever name was sent."""
    if code is None:
        if row.open_enrolment:
            return None
        raise HTTPException(
            401,
            "This campaign enrols by invitation: send the enrolment code the requester gave "
            "you ('code').",
        )
    digest = db.token_hash(code)
    found = conn.execute(sa.select(t_codes).where(t_codes.c.code_hash == digest)).first()
    if found is None or found.campaign_id != row.id:
        raise HTTPException(403, "Unknown enrolment code for this campaign.")
    expires = found.expires_at
    if expires is not None and expires.tzinfo is None:  # SQLite drops the zone
        expires = expires.replace(tzinfo=UTC)
    if expires is not None and expires <= now():
        raise HTTPException(403, "This enrolment code has expired; ask the requester again.")
    if found.worker_id is not None:
        raise HTTPException(USED_CODE[0], USED_CODE[1])
    return digest


def admit(conn: sa.Connection, row: Any, code_digest: str | None, worker_id: str) -> None:
    """Refuses the enrolment (HTTPException) if the campaign is full; else spends the code
    (checked by :func:`invited`) on ``worker_id``, unless a concurrent enrolment spent it
    first."""
    if row.max_workers is not None:
        enrolled = conn.execute(
            sa.select(sa.func.count())
            .select_from(t_workers)
            .where(t_workers.c.campaign_id == row.id)
        ).scalar_one()
        if enrolled > row.max_workers:  # this worker's row is already counted
            raise HTTPException(
                403, f"This campaign is full: it admits {row.max_workers} workers at most."
            )
    if code_digest is None:
        return
    spent = conn.execute(
        t_codes.update()
        .where(t_codes.c.code_hash == code_digest, t_codes.c.worker_id.is_(None))
        .values(worker_id=worker_id, used_at=now())
    )
    if spent.rowcount != 1:
        raise HTTPException(USED_CODE[0], USED_CODE[1])


@router.post("/campaigns/{campaign_id}/workers", status_code=201, response_model=EnrolOut)
def enrol(campaign_id: str, body: EnrolIn, engine: Engine) -> EnrolOut:
    token, digest = db.new_token()
    recovery_code, recovery_digest = db.new_token()
    worker_id = str(uuid.uuid4())
    with engine.begin() as conn:
        row = campaign_row(conn, campaign_id)
        # The code before the name: a request without a valid code is refused the same way
        # whatever name it sends, so it cannot tell an enrolled name from a free one.
        code_digest = invited(conn, row, body.code)
        if row.max_workers is not None:
            # Lock the campaign's row before adding a worker, so two enrolments cannot both
            # see room for one (PostgreSQL; SQLite's BEGIN IMMEDIATE serialises writers and
            # ignores FOR ... UPDATE). NO KEY UPDATE: the worker rows' foreign-key locks
            # do not conflict with it.
            conn.execute(
                sa.select(t_campaigns.c.id)
                .where(t_campaigns.c.id == campaign_id)
                .with_for_update(key_share=True)
            )
        try:
            with conn.begin_nested():
                conn.execute(
                    t_workers.insert().values(
                        id=worker_id,
                        campaign_id=campaign_id,
                        name=body.name,
                        token_hash=digest,
                        spent_epsilon=0.0,
                        enrolled_at=now(),
                        recovery_hash=recovery_digest,
                    )
                )
        except sa.exc.IntegrityError:
            raise HTTPException(409, f"A worker named {body.name!r} is enrolled.") from None
        # After the worker's row (the code points at it), in the same transaction: a
        # refused code leaves no worker behind.
        admit(conn, row, code_digest, worker_id)
    return EnrolOut(worker_id=worker_id, token=token, recovery_code=recovery_code)
