"""The service's access log: one line per request, with nothing a worker or requester entrusted.

A line holds the time (UTC), the client's address, the method, the path, the status and the
duration::

    2026-11-26T05:12:03.481Z 127.0.0.1 POST /campaigns/5f0c.../submissions 201 12.4ms

What it never holds: request or response bodies (answers, perturbed reports, enrolment names,
results), headers (the bearer tokens travel in ``Authorization``), and any secret a client put
in the URL. The path is redacted by rule, not by guessing what a secret looks like: it is
logged as the template of the route it matches (``/campaigns/{campaign_id}/runs``), each
parameter filled in only if it is a UUID (the campaign and run ids the service issues), else
``[redacted]``; under a static folder, only a file the server ships is named; a path that
matches no route is logged as ``/[redacted]``. Of the query, only the keys the service's pages
read are named (``campaign``, ``code``), and of their values only a campaign id (a UUID): the
invitation link ``/collect?campaign=ID&code=SECRET`` is logged as
``/collect?campaign=ID&code=[redacted]``, and every other key and value as ``[redacted]``.
docs/service.md ("Access log") says why.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from starlette.routing import Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The logger ``privtd serve`` writes to (``--access-log``); silent unless given a handler.
LOGGER = logging.getLogger(__name__)
REDACTED = "[redacted]"

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
#: The query keys the service's pages read (the invitation link), and whether a UUID value of
#: the key is logged (a campaign id; a code never is).
QUERY_KEYS = {"campaign": True, "code": False}


@dataclass(frozen=True)
class Routes:
    """What a logged path may show: the app's routes, and the files each static mount serves
    (by the mount's path)."""

    routes: tuple[Any, ...]
    files: dict[str, frozenset[str]]

    @classmethod
    def of(cls, app: Any) -> Routes:
        routes = _each_route(getattr(app, "routes", ()))
        files = {}
        for route in routes:
            if _is_mount(route) and isinstance(route.app, StaticFiles):
                shipped: set[str] = set()
                for folder in route.app.all_directories:
                    root = Path(folder)
                    shipped.update(
                        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                    )
                files[route.path] = frozenset(shipped)
        return cls(routes, files)


def _each_route(routes: Any) -> tuple[Any, ...]:
    """The app's routes one by one. FastAPI 0.137 and later keep each included router as one
    entry, matched lazily, that names no template: their route contexts are what it matches
    with, each with the path its inclusion gives it."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # an older FastAPI copies an included router's routes into the app's
        return tuple(routes)
    return tuple(iter_route_contexts(routes))


def _is_mount(route: Any) -> bool:
    return isinstance(getattr(route, "original_route", route), Mount)


def redact_path(path: str, query: str, routes: Routes, method: str = "GET") -> str:
    """``path?query`` as the access log writes it (see the module's description)."""
    out = _template(path, method, routes)
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        out += "?" + "&".join(_pair(k, v) for k, v in pairs)
    return out


def _template(path: str, method: str, routes: Routes) -> str:
    scope = {"type": "http", "path": path, "root_path": "", "method": method}
    found = None
    for route in routes.routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            found = route, child
            break
        if match is Match.PARTIAL and found is None:  # another method: 405, same template
            found = route, child
    if found is None:
        return "/" + REDACTED
    route, child = found
    if _is_mount(route):
        rest = path[len(child.get("root_path", route.path)) :].lstrip("/")
        shown = rest if rest in routes.files.get(route.path, ()) else REDACTED
        return f"{route.path}/{shown}"
    params = child.get("path_params", {})
    return str(route.path_format).format(
        **{k: v if _UUID.fullmatch(str(v)) else REDACTED for k, v in params.items()}
    )


def _pair(key: str, value: str) -> str:
    if key not in QUERY_KEYS:
        return f"{REDACTED}={REDACTED}"
    keep = QUERY_KEYS[key] and _UUID.fullmatch(value)
    return f"{key}={value if keep else REDACTED}"


class AccessLog:
    """ASGI middleware writing one :data:`LOGGER` line per HTTP request, when it ends.

    The line is written after the response (or the failure), so its status is the one sent:
    500 if the app raised before answering. Outermost, so a 413 of the body limit is logged."""

    def __init__(self, app: ASGIApp, root: Any = None) -> None:
        self.app = app
        self.root = root if root is not None else app
        self._routes: Routes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not LOGGER.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        if self._routes is None:  # the routes are all added once the first request comes
            self._routes = Routes.of(self.root)
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
                redact_path(scope.get("path", ""), query, self._routes, scope.get("method", "GET")),
                status,
                (time.perf_counter() - started) * 1000,
            )
