"""What the routers share: the app's state as dependencies, who is asking (the requester's and
the workers' bearer tokens) and the campaign lookups every route starts with.

The state (the database engine, the server's epsilon ceiling, the aggregation runner) is set
on ``app.state`` by :func:`privtd.service.create_app` and read here per request, so one process
can hold several apps on several databases.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, overload

import sqlalchemy as sa
from fastapi import Depends, Header, HTTPException, Request

from .. import aggregate, db, requesters
from ..schema import campaigns as t_campaigns
from ..schema import requesters as t_requesters
from ..schema import workers as t_workers


async def _engine(request: Request) -> sa.Engine:
    engine: sa.Engine = request.app.state.engine
    return engine


async def _max_epsilon(request: Request) -> float:
    return float(request.app.state.max_epsilon)


async def _runner(request: Request) -> aggregate.Runner:
    runner: aggregate.Runner = request.app.state.runner
    return runner


#: The app's database engine, its epsilon ceiling per answer (privtd serve --max-epsilon) and
#: its aggregation runner. Async, so reading them costs no trip through the thread pool.
Engine = Annotated[sa.Engine, Depends(_engine)]
MaxEpsilon = Annotated[float, Depends(_max_epsilon)]
Runner = Annotated[aggregate.Runner, Depends(_runner)]
#: The bearer token header (module level: FastAPI resolves annotations in module globals).
Auth = Annotated[str | None, Header()]


def now() -> datetime:
    return datetime.now(UTC)


@overload
def utc(when: datetime) -> datetime: ...
@overload
def utc(when: None) -> None: ...
def utc(when: datetime | None) -> datetime | None:
    """``when`` with its zone: SQLite gives back naive datetimes (stored as UTC)."""
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when


def bearer(authorization: str | None) -> str:
    if not authorization or not authorization.startswith("Bearer ") or len(authorization) > 200:
        raise HTTPException(401, "Missing or malformed 'Authorization: Bearer TOKEN' header.")
    return authorization[len("Bearer ") :]


def requester_token(engine: Engine, authorization: Auth = None) -> tuple[str, str]:
    """``(requester id, hash of the token presented)``: what a revocation or rotation of
    that very token is conditioned on."""
    token = bearer(authorization)
    if len(token) < requesters.MIN_TOKEN_LENGTH:
        # Refused even if registered before this check existed: it could be guessed.
        raise HTTPException(
            401,
            f"Requester tokens have at least {requesters.MIN_TOKEN_LENGTH} characters; "
            "this one is too short to be safe (privtd requester rotate makes a new one).",
        )
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(t_requesters.c.id, t_requesters.c.revoked_at).where(
                t_requesters.c.token_hash == db.token_hash(token)
            )
        ).first()
    if row is None:
        raise HTTPException(401, "Unknown requester token.")
    if row.revoked_at is not None:
        raise HTTPException(401, "This requester token was revoked.")
    return str(row.id), db.token_hash(token)


def requester(who: tuple[str, str] = Depends(requester_token)) -> str:
    return who[0]


def campaign_row(conn: sa.Connection, campaign_id: str) -> Any:
    row = conn.execute(sa.select(t_campaigns).where(t_campaigns.c.id == campaign_id)).first()
    if row is None:
        raise HTTPException(404, f"No campaign {campaign_id!r}.")
    return row


def owned(conn: sa.Connection, campaign_id: str, requester_id: str) -> Any:
    row = campaign_row(conn, campaign_id)
    if row.requester_id != requester_id:
        raise HTTPException(403, "This campaign belongs to another requester.")
    return row


def worker(conn: sa.Connection, campaign_id: str, authorization: str | None) -> Any:
    digest = db.token_hash(bearer(authorization))
    row = conn.execute(sa.select(t_workers).where(t_workers.c.token_hash == digest)).first()
    if row is None:
        raise HTTPException(401, "Unknown worker token.")
    if row.campaign_id != campaign_id:
        raise HTTPException(403, "This token belongs to a worker of another campaign.")
    return row
