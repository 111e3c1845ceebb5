"""The HTTP API (FastAPI): campaigns, enrolment, tasks, submissions, aggregation runs, results.

Roles: the requester (a token made when the server's database is first set up, or given to
``privtd serve``) creates campaigns and reads their results; a worker enrols in a campaign,
reads its tasks and public parameters, and submits perturbed reports for itself only. Tokens
are kept as SHA-256 hashes. Every error is a 4xx with ``{"detail": "one line"}``.

This module builds the app (its state, middleware and error handlers); the routes live in
:mod:`.routes`, one router per area, and the bodies in :mod:`.bodies`.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from ..errors import PrivtdError
from . import aggregate, campaigns, db, recovery, requesters
from .access_log import AccessLog
from .body_limit import BodyLimit
from .routes import ROUTERS, pages


def create_app(
    url: str = db.DEFAULT_URL,
    *,
    requester_token: str | None = None,
    max_epsilon: float = campaigns.DEFAULT_MAX_EPSILON,
    dask_scheduler: str | None = None,
    dask_dir: str | None = None,
    dask_security: Any = None,
    dask_allow_plain_tcp: bool = False,
) -> FastAPI:
    """The API on the database at ``url``. ``requester_token``, if given, is registered as a
    requester's (its hash is stored); ``app.state.new_requester_token`` holds a token made
    because the database had no requester yet (``privtd serve`` prints it once).
    ``max_epsilon``: the largest epsilon per answer a campaign may have (refused above).
    ``dask_scheduler``: aggregate campaigns whose method runs on a Dask cluster there, their
    reports written as Parquet under ``dask_dir``; a ``tls://`` address with ``dask_security``
    (``privtd.inference.distributed.tls_security``), a ``tcp://`` one only with
    ``dask_allow_plain_tcp`` (see docs/scale.md)."""
    if not (isinstance(max_epsilon, int | float) and 0 < max_epsilon < math.inf):
        raise PrivtdError(f"max_epsilon must be a positive finite number; got {max_epsilon!r}.")
    if dask_scheduler is not None:  # refused before the database is touched
        from ..inference.distributed import check_scheduler

        check_scheduler(dask_scheduler, dask_security, dask_allow_plain_tcp)
    engine = db.connect(url)
    # FastAPI's own /docs and /redoc load Swagger UI and ReDoc from a CDN, blank offline or
    # on a closed network; fastapi-offline serves the same pages with its packaged copies
    # (MIT; under /static-offline-docs), so the server names no outside host.
    app = FastAPIOffline(
        title="privtd collection service",
        version="1",
        description="Workers perturb on their own device; the server stores perturbed reports.",
        # No online validator badge: it would send the API description to an outside host.
        swagger_ui_parameters={"validatorUrl": None},
    )
    app.state.engine = engine
    app.state.new_requester_token = requesters.ensure(engine, requester_token)
    app.state.runner = aggregate.Runner(
        engine, dask_scheduler, dask_dir, dask_security, dask_allow_plain_tcp
    )
    app.state.max_epsilon = float(max_epsilon)
    # Wrong recovery codes per client address (POST /campaigns/ID/recovery).
    app.state.recovery_limit = recovery.FailureLimit()
    app.add_middleware(BodyLimit)
    # Added last, so outermost: it sees every answer, the body limit's 413 included.
    app.add_middleware(AccessLog, root=app)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        # A value a union refuses gets one error per member: the service's own checks (a NUL,
        # an integer too large) say more than "should be a valid string".
        first = next((e for e in errors if e.get("type") == "value_error"), errors[0])
        where = ".".join(str(p) for p in first.get("loc", ()) if not _union_tag(p)) or "body"
        return JSONResponse({"detail": f"{where}: {first.get('msg', 'invalid')}"}, 422)

    @app.exception_handler(PrivtdError)
    async def _privtd(_request: Request, exc: PrivtdError) -> JSONResponse:
        body: dict[str, Any] = {"detail": str(exc).splitlines()[0]}
        if exc.param is not None:  # for the client's own hint (the CLI names its option)
            body["param"] = exc.param
        return JSONResponse(body, 422)

    for router in ROUTERS:
        app.include_router(router)
    # The browser client: a page that perturbs in the browser (static/perturb.js).
    app.mount("/static", StaticFiles(directory=pages.STATIC), name="static")
    app.include_router(pages.router)
    return app


def _union_tag(part: Any) -> bool:
    """Whether a validation error's location part names a union member, not a field."""
    return part == "body" or part in ("str", "int", "float", "bool") or "[" in str(part)
