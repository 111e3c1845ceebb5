"""The API's request and response bodies (Pydantic): what the OpenAPI description shows.

Request bodies refuse unknown fields (:class:`Strict`) and any value the database or the
service's arithmetic could not hold: a NUL character, an integer beyond a double's exact range,
an infinite or NaN float.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from . import campaigns

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
