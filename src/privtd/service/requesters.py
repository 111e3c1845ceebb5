"""Requester tokens: how strong a token must be, and revoking or replacing one.

A requester token is a bearer secret: whoever holds it creates campaigns and reads their
results. The database keeps only its SHA-256 hash, which is safe only if the token cannot be
guessed, so the service refuses tokens shorter than :data:`MIN_TOKEN_LENGTH` characters. A
token that leaked is revoked (``privtd requester revoke``, ``DELETE /requester/token``) or
replaced by a new one for the same requester and campaigns (``privtd requester rotate``,
``POST /requester/token``).

Over the API, both act on the token the request presented, in one conditional UPDATE (that
token's hash, not yet revoked): whichever of a revocation and a rotation commits first wins, and
the other finds nothing to change and is refused. A revocation that succeeds thus leaves no
token of the requester working, even when a thief holding the same token rotates at the same
moment; a rotation that wins makes the owner's revocation fail with 401 (the token is no longer
the requester's), which tells the owner that someone else replaced it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from ..errors import ValidationError
from . import db
from .schema import campaigns as t_campaigns
from .schema import requesters as t_requesters

#: The shortest requester token accepted: 32 characters, 128 bits if each is a random hex
#: digit (the tokens the server makes are 43 URL-safe characters, 256 bits).
MIN_TOKEN_LENGTH = 32
#: How to make a good token, quoted in the refusal.
HOW_TO_MAKE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def now() -> datetime:
    return datetime.now(UTC)


def check_strength(token: str) -> None:
    """Raise ValidationError if ``token`` is too short to be a requester token.

    Only the length can be checked: a long token that is not random (a word repeated) is as
    weak as its randomness, so make tokens with :data:`HOW_TO_MAKE`.
    """
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValidationError(
            f"A requester token must be at least {MIN_TOKEN_LENGTH} random characters "
            f"(128 bits); got one of {len(token)}. Make one with: {HOW_TO_MAKE}"
        )


def ensure(engine: sa.Engine, token: str | None) -> str | None:
    """Register ``token`` as a requester's (if new); with no token and no requester yet, make
    one and return it (shown once). A revoked token is refused, never registered again."""
    with engine.begin() as conn:
        if token is not None:
            check_strength(token)
            digest = db.token_hash(token)
            known = conn.execute(
                sa.select(t_requesters.c.revoked_at).where(t_requesters.c.token_hash == digest)
            ).first()
            if known is not None and known.revoked_at is not None:
                raise ValidationError(
                    "This requester token was revoked; make a new one (rotate keeps the "
                    "requester's campaigns).",
                    param="requester_token",
                )
            if known is None:
                conn.execute(
                    t_requesters.insert().values(
                        id=str(uuid.uuid4()), token_hash=digest, created_at=now()
                    )
                )
            return None
        if conn.execute(sa.select(sa.func.count()).select_from(t_requesters)).scalar_one():
            return None
        token, digest = db.new_token()
        conn.execute(
            t_requesters.insert().values(id=str(uuid.uuid4()), token_hash=digest, created_at=now())
        )
        return token


def revoke(engine: sa.Engine, requester_id: str) -> None:
    """Revoke the requester's token (the operator's command, by requester id): from now on it
    is refused (401). Its campaigns stay; a new token for them comes from :func:`rotate`."""
    with engine.begin() as conn:
        done = conn.execute(
            t_requesters.update()
            .where(t_requesters.c.id == requester_id, t_requesters.c.revoked_at.is_(None))
            .values(revoked_at=now())
        )
        if done.rowcount != 1:
            _known(conn, requester_id)  # raises if there is no such requester
            raise ValidationError(f"Requester {requester_id}'s token is already revoked.")


def rotate(engine: sa.Engine, requester_id: str) -> str:
    """A new token for the requester (the operator's command, by requester id; the same
    campaigns), revoked or not; the old one stops working."""
    token, digest = db.new_token()
    with engine.begin() as conn:
        _known(conn, requester_id)
        conn.execute(
            t_requesters.update()
            .where(t_requesters.c.id == requester_id)
            .values(token_hash=digest, revoked_at=None)
        )
    return token


def revoke_presented(engine: sa.Engine, digest: str) -> bool:
    """Revoke the token whose hash is ``digest`` if it is still the requester's and unrevoked;
    False if a concurrent rotation or revocation changed it first (nothing is changed then)."""
    with engine.begin() as conn:
        done = conn.execute(
            t_requesters.update()
            .where(t_requesters.c.token_hash == digest, t_requesters.c.revoked_at.is_(None))
            .values(revoked_at=now())
        )
        return done.rowcount == 1


def rotate_presented(engine: sa.Engine, digest: str) -> str | None:
    """A new token replacing the one whose hash is ``digest``, if that one is still the
    requester's and unrevoked; None if a concurrent rotation or revocation changed it first."""
    token, new_digest = db.new_token()
    with engine.begin() as conn:
        done = conn.execute(
            t_requesters.update()
            .where(t_requesters.c.token_hash == digest, t_requesters.c.revoked_at.is_(None))
            .values(token_hash=new_digest)
        )
        return token if done.rowcount == 1 else None


def valid(conn: sa.Connection, digest: str) -> bool:
    """Whether the token whose hash is ``digest`` still authenticates (neither revoked nor
    replaced)."""
    found = conn.execute(
        sa.select(t_requesters.c.id).where(
            t_requesters.c.token_hash == digest, t_requesters.c.revoked_at.is_(None)
        )
    ).first()
    return found is not None


def listing(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every requester: id, when it was made, whether its token is revoked, its campaigns."""
    n_campaigns = (
        sa.select(sa.func.count())
        .select_from(t_campaigns)
        .where(t_campaigns.c.requester_id == t_requesters.c.id)
        .scalar_subquery()
    )
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                t_requesters.c.id,
                t_requesters.c.created_at,
                t_requesters.c.revoked_at,
                n_campaigns.label("campaigns"),
            ).order_by(t_requesters.c.created_at)
        ).all()
    return [dict(r._mapping) for r in rows]


def _known(conn: sa.Connection, requester_id: str) -> None:
    found = conn.execute(
        sa.select(t_requesters.c.id).where(t_requesters.c.id == requester_id)
    ).first()
    if found is None:
        raise ValidationError(
            f"No requester {requester_id!r}; listing shows them.", param="requester_id"
        )
