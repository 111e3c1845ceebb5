"""The body limit: a request body over :data:`MAX_BODY` bytes is refused (413) before any
endpoint reads it, and a URL path holding a NUL character is refused (400)."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

MAX_BODY = 4 * 1024 * 1024


class BodyLimit:
    """Refuses bodies over ``limit`` bytes with 413 before the endpoint reads them, whether
    the client declared a length or streams chunks."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\x00" in scope["path"]:
            # PostgreSQL cannot compare an id holding U+0000; nothing stored holds one.
            await JSONResponse(
                {"detail": "The URL path holds a NUL character (%00); no id or key has one."},
                400,
            )(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(self.limit)(scope, receive, send)
            return
        seen = 0
        refused = False

        async def counted() -> Any:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                # Answer 413 here and tell the endpoint the client left: an exception raised
                # into the endpoint's body reading would become FastAPI's 400 instead.
                refused = True
                await _too_large(self.limit)(scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def guarded(message: Any) -> None:
            if not refused:  # the endpoint's own answer, once the 413 is out, goes nowhere
                await send(message)

        await self.app(scope, counted, guarded)


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse(
        {"detail": f"Body over {limit} bytes; send fewer reports per request."}, 413
    )
