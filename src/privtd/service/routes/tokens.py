"""The requester's token: rotated (a new one, the same campaigns) or revoked by its holder."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response

from .. import requesters
from ..bodies import TokenOut
from ._deps import Engine, requester_token

router = APIRouter()

#: The answer to a request whose requester token was revoked or replaced while it ran.
STALE_TOKEN = (
    "This requester token was revoked or replaced while the request ran; if you did not "
    "replace it, it leaked: ask the server's operator (privtd requester revoke / rotate)."
)


@router.post("/requester/token", status_code=201, response_model=TokenOut)
def rotate_token(engine: Engine, who: tuple[str, str] = Depends(requester_token)) -> TokenOut:
    """A new token for this requester (the same campaigns); the one sent stops working.
    Refused (401) if that token was revoked or replaced meanwhile."""
    requester_id, digest = who
    token = requesters.rotate_presented(engine, digest)
    if token is None:
        raise HTTPException(401, STALE_TOKEN)
    return TokenOut(requester_id=requester_id, token=token)


@router.delete("/requester/token", status_code=204)
def revoke_token(engine: Engine, who: tuple[str, str] = Depends(requester_token)) -> Response:
    """Revoke the token sent: it is refused from now on, and exports it is streaming stop.
    Only the server's operator can make a new one then (``privtd requester rotate``).
    Refused (401) if that token was replaced or revoked meanwhile: a 204 means no token of
    this requester works any more."""
    _, digest = who
    if not requesters.revoke_presented(engine, digest):
        raise HTTPException(401, STALE_TOKEN)
    return Response(status_code=204)
