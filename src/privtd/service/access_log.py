"""The service's access log: one line per request, with nothing a worker or requester entrusted.

A line holds the time (UTC), the client's address, the method, the path, the status and the
duration::

    2026-11-26T05:12:03.481Z 127.0.0.1 POST /campaigns/5f0c.../submissions 201 12.4ms

What it never holds: request or response bodies (answers, perturbed reports, enrolment names,
results), headers (the bearer tokens travel in ``Authorization``), and any secret a client put
in the URL. The path is rebuilt from what the service itself issues: a segment is kept only if
it is one of the API's own words (``campaigns``, ``runs``, ...), a UUID (campaign, run and
worker ids), or a file name under ``/static``; anything else (a token or an enrolment code
pasted into a path, a mistyped URL) becomes ``[redacted]``. Query strings keep their keys and
only UUID values: ``/collect?campaign=ID&code=SECRET`` is logged as
``/collect?campaign=ID&code=[redacted]``. docs/service.md ("Access log") says why.
"""

from __future__ import annotations

import logging
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The logger ``privtd serve`` writes to (``--access-log``); silent unless given a handler.
LOGGER = logging.getLogger(__name__)
REDACTED = "[redacted]"

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Files of the static folders (perturb.js, swagger-ui.css): short names with an extension.
_FILE = re.compile(r"[A-Za-z0-9_-]{1,60}\.[A-Za-z0-9.]{1,10}")
# A query key kept as is: a short name. A secret sent as a key (``?TOKEN``) is longer: the
# service's tokens and codes have 43 characters, a requester's own token at least 32.
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,23}")


def _words(app: Any) -> frozenset[str]:
    """Every literal segment of the app's routes and mounts (what a safe path is made of)."""
    words = {"favicon.ico", "robots.txt"}
    for route in getattr(app, "routes", ()):
        for part in str(getattr(route, "path", "")).split("/"):
            if part and "{" not in part:
                words.add(part)
    return frozenset(words)


def redact_path(path: str, query: str, words: frozenset[str]) -> str:
    """``path?query`` with every segment and query value the service did not issue redacted."""
    parts = path.split("/")
    static = len(parts) > 2 and parts[1] in words and parts[1].startswith("static")
    kept = [
        p
        if (not p or p in words or _UUID.fullmatch(p) or (static and _FILE.fullmatch(p)))
        else REDACTED
        for p in parts
    ]
    out = "/".join(kept)
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        out += "?" + "&".join(
            f"{k if _KEY.fullmatch(k) else REDACTED}={v if _UUID.fullmatch(v) else REDACTED}"
            for k, v in pairs
        )
    return out


class AccessLog:
    """ASGI middleware writing one :data:`LOGGER` line per HTTP request, when it ends.

    The line is written after the response (or the failure), so its status is the one sent:
    500 if the app raised before answering. Outermost, so a 413 of the body limit is logged."""

    def __init__(self, app: ASGIApp, root: Any = None) -> None:
        self.app = app
        self.root = root if root is not None else app
        self._words: frozenset[str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not LOGGER.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        if self._words is None:  # the routes are all added once the first request comes
            self._words = _words(self.root)
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            query = scope.get("query_string", b"").decode("latin-1")
            LOGGER.info(
                "%s %s %s %s %d %.1fms",
                datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                client[0] if client else "-",
                scope.get("method", "-"),
                redact_path(scope.get("path", ""), query, self._words),
                status,
                (time.perf_counter() - started) * 1000,
            )
