"""The HTTP API (FastAPI): campaigns, enrolment, tasks, submissions, aggregation runs, results.

Roles: the requester (a token made when the server's database is first set up, or given to
``privtd serve``) creates campaigns and reads their results; a worker enrols in a campaign,
reads its tasks and public parameters, and submits perturbed reports for itself only. Tokens
are kept as SHA-256 hashes. Every error is a 4xx with ``{"detail": "one line"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, overload

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from ..client import DEFAULT_MAX_EPSILON_PER_ANSWER, DEFAULT_MAX_LIFETIME_EPSILON
from ..errors import PrivtdError
from . import adaptive, aggregate, campaigns, db, recovery, requesters
from .access_log import AccessLog
from .schema import campaigns as t_campaigns
from .schema import enrolment_codes as t_codes
from .schema import reports as t_reports
from .schema import requesters as t_requesters
from .schema import runs as t_runs
from .schema import submissions as t_submissions
from .schema import tasks as t_tasks
from .schema import workers as t_workers

STATIC = Path(__file__).with_name("static")
MAX_BODY = 4 * 1024 * 1024
MAX_REPORTS = campaigns.MAX_REPORTS


def _no_nul(text: str) -> str:
    # PostgreSQL's text types cannot hold U+0000 (SQLite can): refused on both, so the two
    # databases accept the same requests.
    if "\x00" in text:
        raise ValueError(
            "holds a NUL character (\\u0000), which the service does not store; remove it"
        )
    return text


def _exact_int(value: int) -> int:
    # Every number the service keeps is a double (report values, the mechanism's arithmetic):
    # an integer a double cannot hold (10**400) would overflow there.
    if abs(value) > 2**53:
        raise ValueError(
            f"integer with {len(str(abs(value)))} digits is beyond 2**53, the largest a double "
            "holds exactly; send a number in [-2**53, 2**53]"
        )
    return value


#: A string the database can store (no NUL), an integer a double holds exactly, a finite float.
Text = Annotated[str, AfterValidator(_no_nul)]
ExactInt = Annotated[int, AfterValidator(_exact_int)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Label = Text | ExactInt | Finite | bool
Param = Finite | ExactInt | Text | None
#: The bearer token header (module level: FastAPI resolves annotations in module globals).
Auth = Annotated[str | None, Header()]


def now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------------- bodies
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TaskIn(Strict):
    key: Text = Field(min_length=1, max_length=200)
    text: Text = Field(default="", max_length=10_000)


class AdaptiveIn(Strict):
    """A campaign's adaptive redundancy (``privtd.inference.adaptive.AdaptiveRedundancy``)."""

    target: float = Field(
        default=0.95, gt=0, lt=1, description="Confidence at which a task is settled."
    )
    max_per_task: int = Field(default=10, ge=1, le=1_000_000, description="Reports a task.")
    min_per_task: int = Field(
        default=1, ge=0, le=1_000_000, description="Reports every task gets first."
    )
    batch: int = Field(default=20, ge=1, le=MAX_REPORTS, description="Tasks handed at a time.")
    max_answers: int | None = Field(
        default=None, ge=1, le=2**53, description="The campaign's answer budget (reports)."
    )
    model: Literal["method", "pooled"] = Field(
        default="method",
        description="Whose posteriors rank the tasks: the campaign's method fitted on the "
        "other workers' reports, or a pooled model (no fit; for large campaigns).",
    )


class CampaignIn(Strict):
    name: Text = Field(min_length=1, max_length=200)
    tasks: list[TaskIn] = Field(min_length=1, max_length=1_000_000)
    mechanism: Text = Field(max_length=32)
    # Checked against the server's ceiling (privtd serve --max-epsilon) once the mechanism is
    # built, whichever way its parameters are given.
    epsilon: float | None = Field(default=None, gt=0)
    params: dict[Text, Param] = Field(default_factory=dict, max_length=10)
    labels: list[Label] | None = Field(default=None, min_length=2, max_length=1000)
    budget: float = Field(gt=0, le=1e6, description="Each worker's privacy budget (epsilon).")
    method: Text | None = Field(default=None, max_length=32)
    open_enrolment: bool = Field(
        default=False,
        description="Let anyone enrol without a code. Anyone can then add workers (fake ones "
        "included), each with a fresh budget: prefer codes (POST /campaigns/ID/codes).",
    )
    max_workers: int | None = Field(default=None, ge=1, le=10_000_000)
    max_answers_per_worker: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="The most answers one worker may report in this campaign (None: every task).",
    )
    workers_raise_ceiling: bool = Field(
        default=False,
        description="Accept a campaign in which one worker can spend more than the workers' "
        "default ceiling over all their campaigns (100): its workers will raise theirs.",
    )
    adaptive: AdaptiveIn | None = Field(
        default=None,
        description="Adaptive redundancy: each worker's task list holds the least settled "
        "tasks only, until each reaches the target confidence or its cap, or the campaign its "
        "answer budget (docs/service.md).",
    )


class MechanismOut(BaseModel):
    name: str
    params: dict[str, Any]
    #: The mechanism's epsilon for one ``unit`` alone (P0's marginal figure for two-layer).
    epsilon: float
    unit: str
    guarantee: str
    #: A worker who answers every task in one submission (one private draw) releases this
    #: many units; epsilon per unit given its others of that draw, and of all together.
    answers_per_draw: int
    answer_epsilon: float
    release_epsilon: float


class CampaignOut(BaseModel):
    id: str
    name: str
    kind: str
    mechanism: MechanismOut
    labels: list[Label] | None
    budget: float
    method: str
    n_tasks: int
    whole_row: bool
    open_enrolment: bool
    max_workers: int | None
    max_answers_per_worker: int | None = None
    #: Numeric mechanisms: the reports the server accepts (an honest release falls outside with
    #: probability at most 1e-12 per report); None where the output domain is finite.
    report_range: list[float] | None
    #: Adaptive redundancy's settings (None: every worker is handed every task).
    adaptive: dict[str, Any] | None = None
    #: Set when the campaign is made with open enrolment.
    warning: str | None = None


class CodesIn(Strict):
    count: int = Field(default=1, ge=1, le=10_000)
    expires_in_s: float | None = Field(
        default=None, gt=0, le=366 * 86400, description="Seconds until the codes expire."
    )


class CodesOut(BaseModel):
    codes: list[str]
    expires_at: datetime | None


class TokenOut(BaseModel):
    requester_id: str
    token: str


class EnrolIn(Strict):
    name: Text = Field(min_length=1, max_length=200)
    code: Text | None = Field(default=None, max_length=200)


class EnrolOut(BaseModel):
    worker_id: str
    token: str
    #: Shown here only (stored hashed): redeemed once at POST /campaigns/ID/recovery for a
    #: fresh token of this same worker, should the token be lost.
    recovery_code: str


class RecoverIn(Strict):
    code: Text = Field(min_length=1, max_length=200, description="The recovery code.")
    # Made by the worker's device, not the server, so that a retry of a request whose answer
    # was lost sends the same body and reads the same outcome (a code works once).
    token: Text = Field(
        min_length=32, max_length=200, description="The worker's new token (random, 32+ chars)."
    )
    next_code: Text = Field(
        min_length=32,
        max_length=200,
        description="The worker's next recovery code (random, 32+ chars), replacing 'code'.",
    )


class RecoverOut(BaseModel):
    """A recovered worker: the same worker, with what it has spent (recovery never resets it);
    its token and recovery code are now the ones the request sent."""

    worker_id: str
    name: str
    budget: float
    spent_epsilon: float
    #: The reports the worker has sent (what counts against ``max_answers_per_worker``).
    n_reports: int
    #: True for a retry of a recovery already done with the same body.
    replayed: bool


class RecoveryCodeOut(BaseModel):
    recovery_code: str


class TaskOut(BaseModel):
    key: str
    text: str


class ReportIn(Strict):
    task: Text = Field(min_length=1, max_length=200)
    value: Label | None


class MechanismIn(Strict):
    name: Text = Field(max_length=32)
    params: dict[Text, Param] = Field(max_length=10)


class SubmissionIn(Strict):
    mechanism: MechanismIn
    reports: list[ReportIn] = Field(min_length=1, max_length=MAX_REPORTS)


class SubmissionOut(BaseModel):
    submission_id: str
    n_reports: int
    epsilon: float
    spent_epsilon: float
    replayed: bool


class RunOut(BaseModel):
    run_id: str
    status: str
    method: str
    n_reports: int
    iteration: int
    max_iter: int
    error: str | None
    #: The finished run whose fit this one resumed from (None: fitted from scratch).
    warm_start_from: str | None
    #: When the run was asked for, and when it ended (done or failed; None while it runs).
    started_at: datetime | None = None
    finished_at: datetime | None = None


class CampaignSummary(BaseModel):
    """One line of the requester's campaign list (GET /campaigns)."""

    id: str
    name: str
    mechanism: str
    epsilon: float
    unit: str
    #: As in the campaign's description (MechanismOut): a worker answering every task at once.
    answers_per_draw: int
    answer_epsilon: float
    release_epsilon: float
    budget: float
    method: str
    created_at: datetime
    #: Workers enrolled, and perturbed reports received (NULL reports included).
    workers: int
    reports: int
    #: "collecting" (never aggregated), "aggregating" (a run is queued or running),
    #: "aggregated" (the newest run is done) or "failed" (the newest run failed).
    state: str


# ---------------------------------------------------------------------------- limits
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


# ---------------------------------------------------------------------------- app
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
        return JSONResponse({"detail": str(exc).splitlines()[0]}, 422)

    _routes(app, engine, float(max_epsilon))
    # The browser client: a page that perturbs in the browser (static/perturb.js).
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/collect", include_in_schema=False)
    def collect() -> FileResponse:
        return FileResponse(STATIC / "collect.html", media_type="text/html")

    return app


def _union_tag(part: Any) -> bool:
    """Whether a validation error's location part names a union member, not a field."""
    return part == "body" or part in ("str", "int", "float", "bool") or "[" in str(part)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.startswith("Bearer ") or len(authorization) > 200:
        raise HTTPException(401, "Missing or malformed 'Authorization: Bearer TOKEN' header.")
    return authorization[len("Bearer ") :]


#: A code that already admitted a worker (status, detail).
USED_CODE = (403, "This enrolment code was already used; each admits one worker.")

OPEN_WARNING = (
    "Open enrolment: anyone who has the campaign's id can enrol, as many identities as they "
    "like (up to max_workers), each with a fresh budget; fake workers can then send any report "
    "in the accepted range. Prefer enrolment codes (docs/service.md)."
)


#: The answer to a request whose requester token was revoked or replaced while it ran.
STALE_TOKEN = (
    "This requester token was revoked or replaced while the request ran; if you did not "
    "replace it, it leaked: ask the server's operator (privtd requester revoke / rotate)."
)


class _Stale(Exception):
    """Raised in a streamed answer when the token it was authenticated with stops working."""


class _Revocable(StreamingResponse):
    """A streamed answer cut short when its requester token stops working: the connection is
    closed without the body's last chunk, so the client sees a download that failed (never a
    complete-looking file that holds only part of the reports)."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except _Stale:
            return  # the server closes the connection: the answer never completes


def _routes(app: FastAPI, engine: sa.Engine, max_epsilon: float) -> None:
    def requester_token(authorization: Auth = None) -> tuple[str, str]:
        """``(requester id, hash of the token presented)``: what a revocation or rotation of
        that very token is conditioned on."""
        token = _bearer(authorization)
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
        digest = db.token_hash(_bearer(authorization))
        row = conn.execute(sa.select(t_workers).where(t_workers.c.token_hash == digest)).first()
        if row is None:
            raise HTTPException(401, "Unknown worker token.")
        if row.campaign_id != campaign_id:
            raise HTTPException(403, "This token belongs to a worker of another campaign.")
        return row

    def describe(conn: sa.Connection, row: Any) -> CampaignOut:
        mech = campaigns.rebuild(row.mechanism, row.mechanism_params)
        n_tasks = conn.execute(
            sa.select(sa.func.count()).select_from(t_tasks).where(t_tasks.c.campaign_id == row.id)
        ).scalar_one()
        g = mech.guarantee
        bounds = campaigns.report_range(mech)
        k = campaigns.answers_per_draw(mech, n_tasks, row.max_answers_per_worker)
        per, whole = campaigns.figures(mech, k)
        return CampaignOut(
            id=row.id,
            name=row.name,
            kind=mech.kind,
            mechanism=MechanismOut(
                name=row.mechanism,
                params=row.mechanism_params,
                epsilon=g.epsilon,
                unit=g.unit,
                guarantee=str(g),
                answers_per_draw=k,
                answer_epsilon=per,
                release_epsilon=whole,
            ),
            labels=row.labels,
            budget=row.budget_epsilon,
            method=row.method,
            n_tasks=n_tasks,
            whole_row=campaigns.whole_row(mech),
            open_enrolment=row.open_enrolment,
            max_workers=row.max_workers,
            max_answers_per_worker=row.max_answers_per_worker,
            report_range=None if bounds is None else list(bounds),
            adaptive=row.adaptive,
            warning=OPEN_WARNING if row.open_enrolment else None,
        )

    @app.post("/campaigns", status_code=201, response_model=CampaignOut)
    def create_campaign(body: CampaignIn, requester_id: str = Depends(requester)) -> CampaignOut:
        mech = campaigns.build_mechanism(body.mechanism, body.epsilon, body.params, body.labels)
        cap = body.max_answers_per_worker
        # Per answer given the worker's others, for a worker who answers every task it may at
        # once; then what that worker spends in all, against the workers' default lifetime
        # ceiling, so a campaign every default worker would be refused in is refused here.
        campaigns.check_campaign_epsilon(
            mech, len(body.tasks), max_epsilon, DEFAULT_MAX_EPSILON_PER_ANSWER, cap
        )
        spend, answerable = campaigns.check_worker_spend(
            mech, len(body.tasks), body.budget, cap, raise_ok=body.workers_raise_ceiling
        )
        campaigns.check_report_range(mech)
        labels = campaigns.check_labels(mech, body.labels)
        method = campaigns.pick_method(mech, body.method)
        settings = None
        if body.adaptive is not None:
            settings = adaptive.check(mech, body.adaptive.model_dump(), len(labels or ()))
        keys = [t.key for t in body.tasks]
        if len(set(keys)) != len(keys):
            raise HTTPException(422, "tasks: task keys must be distinct.")
        campaign_id = str(uuid.uuid4())
        with engine.begin() as conn:
            conn.execute(
                t_campaigns.insert().values(
                    id=campaign_id,
                    requester_id=requester_id,
                    name=body.name,
                    mechanism=mech.name,
                    mechanism_params=campaigns.public_params(mech),
                    labels=labels,
                    budget_epsilon=body.budget,
                    method=method,
                    created_at=now(),
                    open_enrolment=body.open_enrolment,
                    max_workers=body.max_workers,
                    max_answers_per_worker=cap,
                    adaptive=settings,
                )
            )
            conn.execute(
                t_tasks.insert(),
                [
                    {"campaign_id": campaign_id, "position": i, "key": t.key, "text": t.text}
                    for i, t in enumerate(body.tasks)
                ],
            )
            out = describe(conn, campaign_row(conn, campaign_id))
        if spend > DEFAULT_MAX_LIFETIME_EPSILON * (1 + 1e-12):
            raised = (
                f"A worker who answers all {answerable} tasks it may spends epsilon {spend:.4g}, "
                f"past the workers' default ceiling of {DEFAULT_MAX_LIFETIME_EPSILON:g} over all "
                "their campaigns: tell them to raise it ('privtd client ceiling --lifetime X', or "
                "the page's ceiling form), or they stop there."
            )
            out.warning = raised if out.warning is None else f"{out.warning} {raised}"
        return out

    @app.post("/requester/token", status_code=201, response_model=TokenOut)
    def rotate_token(who: tuple[str, str] = Depends(requester_token)) -> TokenOut:
        """A new token for this requester (the same campaigns); the one sent stops working.
        Refused (401) if that token was revoked or replaced meanwhile."""
        requester_id, digest = who
        token = requesters.rotate_presented(engine, digest)
        if token is None:
            raise HTTPException(401, STALE_TOKEN)
        return TokenOut(requester_id=requester_id, token=token)

    @app.delete("/requester/token", status_code=204)
    def revoke_token(who: tuple[str, str] = Depends(requester_token)) -> Response:
        """Revoke the token sent: it is refused from now on, and exports it is streaming stop.
        Only the server's operator can make a new one then (``privtd requester rotate``).
        Refused (401) if that token was replaced or revoked meanwhile: a 204 means no token of
        this requester works any more."""
        _, digest = who
        if not requesters.revoke_presented(engine, digest):
            raise HTTPException(401, STALE_TOKEN)
        return Response(status_code=204)

    @app.get("/campaigns", response_model=list[CampaignSummary])
    def list_campaigns(requester_id: str = Depends(requester)) -> list[CampaignSummary]:
        """The campaigns of the requester whose token is sent (no one else's), oldest first."""
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(t_campaigns)
                .where(t_campaigns.c.requester_id == requester_id)
                .order_by(t_campaigns.c.created_at, t_campaigns.c.id)
            ).all()
            # The requester's campaign ids as a subquery: no list of ids sent back to the database.
            ids = sa.select(t_campaigns.c.id).where(t_campaigns.c.requester_id == requester_id)
            workers = _counts(conn, t_workers.c.campaign_id, ids)
            reports = _counts(conn, t_reports.c.campaign_id, ids)
            n_tasks = _counts(conn, t_tasks.c.campaign_id, ids)
            newest: dict[str, str] = {}
            for campaign_id, status in conn.execute(
                sa.select(t_runs.c.campaign_id, t_runs.c.status)
                .where(t_runs.c.campaign_id.in_(ids))
                .order_by(t_runs.c.created_at)
            ):
                newest[campaign_id] = status  # the last one seen is the newest
        out = []
        for r in rows:
            mech = campaigns.rebuild(r.mechanism, r.mechanism_params)
            g = mech.guarantee
            k = campaigns.answers_per_draw(mech, n_tasks.get(r.id, 0), r.max_answers_per_worker)
            per, whole = campaigns.figures(mech, k)
            out.append(
                CampaignSummary(
                    id=r.id,
                    name=r.name,
                    mechanism=r.mechanism,
                    epsilon=g.epsilon,
                    unit=g.unit,
                    answers_per_draw=k,
                    answer_epsilon=per,
                    release_epsilon=whole,
                    budget=r.budget_epsilon,
                    method=r.method,
                    created_at=_utc(r.created_at),
                    workers=workers.get(r.id, 0),
                    reports=reports.get(r.id, 0),
                    state=RUN_STATE.get(newest.get(r.id, ""), "collecting"),
                )
            )
        return out

    @app.get("/campaigns/{campaign_id}/runs", response_model=list[RunOut])
    def list_runs(campaign_id: str, requester_id: str = Depends(requester)) -> list[RunOut]:
        """The campaign's aggregation runs, oldest first."""
        with engine.connect() as conn:
            owned(conn, campaign_id, requester_id)
            rows = conn.execute(
                sa.select(t_runs)
                .where(t_runs.c.campaign_id == campaign_id)
                .order_by(t_runs.c.created_at, t_runs.c.id)
            ).all()
        return [_run_out(r) for r in rows]

    @app.get(
        "/campaigns/{campaign_id}/reports",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/csv": {}}, "description": "task,worker,answer"}},
    )
    def export_reports(campaign_id: str, who: tuple[str, str] = Depends(requester_token)) -> Any:
        """The campaign's perturbed reports as CSV (task,worker,answer; an empty answer is a
        NULL report): what the workers' devices sent, never a raw answer. Workers are named as
        they enrolled, as in the results. If the token is revoked or replaced during the
        download, the download stops there, without its end (an incomplete chunked body)."""
        requester_id, digest = who
        with engine.connect() as conn:
            row = owned(conn, campaign_id, requester_id)
        return _Revocable(
            _report_lines(engine, row, digest),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="{campaign_id}.csv"'},
        )

    @app.get("/campaigns/{campaign_id}", response_model=CampaignOut)
    def get_campaign(campaign_id: str) -> CampaignOut:
        """The campaign's public parameters: what a worker's device perturbs with."""
        with engine.connect() as conn:
            return describe(conn, campaign_row(conn, campaign_id))

    @app.post("/campaigns/{campaign_id}/codes", status_code=201, response_model=CodesOut)
    def issue_codes(
        campaign_id: str, body: CodesIn, requester_id: str = Depends(requester)
    ) -> CodesOut:
        """Enrolment codes: each admits one worker, once; shown here only (stored hashed)."""
        expires = (
            None if body.expires_in_s is None else now() + timedelta(seconds=body.expires_in_s)
        )
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

    @app.post("/campaigns/{campaign_id}/workers", status_code=201, response_model=EnrolOut)
    def enrol(campaign_id: str, body: EnrolIn) -> EnrolOut:
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

    @app.post("/campaigns/{campaign_id}/recovery", response_model=RecoverOut)
    def recover(campaign_id: str, body: RecoverIn, request: Request) -> RecoverOut:
        """Bind the worker whose recovery code is sent to the new token and next code the
        request carries: the same worker (name, reports, spent epsilon), never a fresh budget.
        The code works once, and the worker's previous token stops working. A retry with the
        same body (its answer lost) is answered again. Every wrong code gets the same answer;
        past recovery.MAX_FAILURES of them in recovery.WINDOW_S seconds, a client address is
        refused (429) whatever it sends."""
        limit: recovery.FailureLimit = app.state.recovery_limit
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

    @app.post(
        "/campaigns/{campaign_id}/recovery-code", status_code=201, response_model=RecoveryCodeOut
    )
    def new_recovery_code(campaign_id: str, authorization: Auth = None) -> RecoveryCodeOut:
        """A new recovery code for the worker whose token is sent (one enrolled before recovery
        codes existed, or whose code may have leaked); its previous code stops working."""
        code, code_digest = db.new_token()
        with engine.begin() as conn:
            who = worker(conn, campaign_id, authorization)
            conn.execute(
                t_workers.update().where(t_workers.c.id == who.id).values(recovery_hash=code_digest)
            )
        return RecoveryCodeOut(recovery_code=code)

    @app.get("/campaigns/{campaign_id}/tasks", response_model=list[TaskOut])
    def list_tasks(campaign_id: str, authorization: Auth = None) -> list[TaskOut]:
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

    @app.post(
        "/campaigns/{campaign_id}/submissions",
        status_code=201,
        response_model=SubmissionOut,
        responses={200: {"model": SubmissionOut, "description": "A replay of an earlier key."}},
    )
    def submit(
        campaign_id: str,
        body: SubmissionIn,
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
            spent = who.spent_epsilon + epsilon
            if spent > row.budget_epsilon * (1 + 1e-12):
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

    @app.post("/campaigns/{campaign_id}/runs", status_code=202, response_model=RunOut)
    def start_run(campaign_id: str, requester_id: str = Depends(requester)) -> RunOut:
        with engine.begin() as conn:
            row = owned(conn, campaign_id, requester_id)
        run_id = app.state.runner.start(row)
        return _run(engine, campaign_id, run_id)

    @app.get("/campaigns/{campaign_id}/runs/{run_id}", response_model=RunOut)
    def get_run(campaign_id: str, run_id: str, requester_id: str = Depends(requester)) -> RunOut:
        with engine.connect() as conn:
            owned(conn, campaign_id, requester_id)
        return _run(engine, campaign_id, run_id)

    @app.get("/campaigns/{campaign_id}/results")
    def results(campaign_id: str, requester_id: str = Depends(requester)) -> dict[str, Any]:
        """The newest finished run's truths, confidence, worker quality and privacy report."""
        with engine.connect() as conn:
            owned(conn, campaign_id, requester_id)
            row = conn.execute(
                sa.select(t_runs)
                .where(t_runs.c.campaign_id == campaign_id, t_runs.c.status == "done")
                .order_by(t_runs.c.created_at.desc())
                .limit(1)
            ).first()
        if row is None:
            raise HTTPException(404, "No finished aggregation run yet: POST .../runs first.")
        return {"run_id": row.id, **row.result}


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


def _run(engine: sa.Engine, campaign_id: str, run_id: str) -> RunOut:
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(t_runs).where(t_runs.c.id == run_id, t_runs.c.campaign_id == campaign_id)
        ).first()
    if row is None:
        raise HTTPException(404, f"No run {run_id!r} in this campaign.")
    return _run_out(row)


def _run_out(row: Any) -> RunOut:
    return RunOut(
        run_id=row.id,
        status=row.status,
        method=row.method,
        n_reports=row.n_reports,
        iteration=row.iteration,
        max_iter=row.max_iter,
        error=row.error,
        warm_start_from=row.warm_from,
        started_at=_utc(row.created_at),
        finished_at=_utc(row.finished_at),
    )


#: A campaign's state in the list, from its newest run's status (none: "collecting").
RUN_STATE = {
    "queued": "aggregating",
    "running": "aggregating",
    "done": "aggregated",
    "failed": "failed",
}


@overload
def _utc(when: datetime) -> datetime: ...
@overload
def _utc(when: None) -> None: ...
def _utc(when: datetime | None) -> datetime | None:
    """``when`` with its zone: SQLite gives back naive datetimes (stored as UTC)."""
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when


def _counts(conn: sa.Connection, column: Any, ids: Any) -> dict[str, int]:
    """Rows per campaign id in ``column``'s table (ids: a subquery), one grouped query."""
    query = sa.select(column, sa.func.count()).where(column.in_(ids)).group_by(column)
    return {str(k): int(n) for k, n in conn.execute(query)}


#: Reports per chunk of the CSV export: a campaign's reports are never all in memory.
EXPORT_CHUNK = 10_000


def _report_lines(engine: sa.Engine, campaign: Any, digest: str) -> Iterator[str]:
    """The campaign's reports as CSV text, chunk by chunk, labels and task keys decoded; raises
    :class:`_Stale` before a chunk if the requester token hashed ``digest`` stopped working."""
    import numpy as np
    import pandas as pd

    from .._csv import to_csv

    mech = campaigns.rebuild(campaign.mechanism, campaign.mechanism_params)
    labels = campaign.labels if mech.kind == "categorical" else None
    integral = campaigns.integer_reports(mech)
    with engine.connect() as conn:
        # Positions run 0..n_tasks-1 (the order the campaign listed its tasks in).
        keys = pd.Series(
            dict(
                conn.execute(
                    sa.select(t_tasks.c.position, t_tasks.c.key).where(
                        t_tasks.c.campaign_id == campaign.id
                    )
                ).all()
            )
        ).sort_index()
        names = pd.Series(
            dict(
                conn.execute(
                    sa.select(t_workers.c.id, t_workers.c.name).where(
                        t_workers.c.campaign_id == campaign.id
                    )
                ).all()
            ),
            dtype=object,
        )
        conn.commit()
        yield "task,worker,answer\n"
        query = (
            sa.select(t_reports.c.task_position, t_reports.c.worker_id, t_reports.c.value)
            .where(t_reports.c.campaign_id == campaign.id)
            .order_by(t_reports.c.task_position, t_reports.c.worker_id)
            .limit(EXPORT_CHUNK)
        )
        after: tuple[int, str] | None = None
        while True:
            # Page by the primary key, each page one short query: no cursor held open across
            # the whole download. The driver's plain tuples, decoded a page at a time.
            page = query
            if after is not None:
                # SQLite and PostgreSQL both seek the primary key's index to this row (the
                # campaign's equality, then the row comparison), not scan from the top.
                page = page.where(
                    sa.tuple_(t_reports.c.task_position, t_reports.c.worker_id) > sa.tuple_(*after)
                )
            result = conn.execute(page)
            rows = result.cursor.fetchall()
            result.close()
            # No transaction stays open while a page is decoded or sent: one held across the
            # download would read a single snapshot, and on SQLite hold the write lock, so a
            # revocation would wait for the download to end instead of stopping it.
            conn.commit()
            if not rows:
                break
            after = (rows[-1][0], rows[-1][1])
            chunk = pd.DataFrame(rows, columns=["task", "worker", "value"])
            value = chunk["value"].astype(float)
            # A NULL report stays empty: None, pandas' NA or NaN are all written as "".
            shown: Any
            if labels is not None:
                shown = np.full(len(value), None, dtype=object)
                present = value.notna().to_numpy()
                shown[present] = np.asarray(labels, dtype=object)[
                    value[present].to_numpy(dtype=np.int64)
                ]
            elif integral:
                shown = value.astype("Int64").array
            else:
                shown = value.to_numpy()
            frame = pd.DataFrame(
                {
                    "task": keys.to_numpy()[chunk["task"].to_numpy(dtype=np.int64)],
                    "worker": names.reindex(chunk["worker"]).to_numpy(),
                    "value": shown,
                }
            )
            # Task keys, worker names and labels are escaped against spreadsheet formulas.
            text = to_csv(frame, index=False, header=False, lineterminator="\n")
            # Checked, in a transaction of its own, before each page leaves: once the token is
            # revoked or replaced, nothing more is sent (what the network already carries
            # still arrives).
            if not requesters.valid(conn, digest):
                raise _Stale
            conn.commit()
            yield text
