"""Adaptive redundancy in a campaign: its settings, checked once at creation, and the tasks its
task list hands a worker, computed from the stored reports of the other workers.

The policy is :class:`privtd.inference.adaptive.AdaptiveRedundancy`. What a worker is handed is a
function of the other workers' perturbed reports (each a differentially private release) and of
which tasks this worker already answered; never of this worker's own reports, raw or perturbed
(``docs/service.md``).
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from ..answers import Answers
from ..errors import ValidationError
from ..inference import make_estimator, takes_mechanism
from ..inference.adaptive import AdaptiveRedundancy, TaskPosteriors
from ..mechanisms._base import Mechanism
from .schema import reports as t_reports
from .schema import tasks as t_tasks

#: The policy's settings a campaign may give (the policy's defaults where it does not).
SETTINGS = ("target", "max_per_task", "min_per_task", "batch", "max_answers")
#: Whose posteriors rank the tasks: the campaign's method fitted on the other workers' reports
#: (each worker weighed by its fitted accuracy), or the policy's pooled model (every report
#: weighed alike; one grouped count query, no fit: for campaigns too large to fit per request).
MODELS = ("method", "pooled")
#: Past this many reports of the other workers the pooled model ranks the tasks even under
#: ``model="method"``: each listing fits the method afresh (about 0.3 s of one core for the
#: default aware method on 100,000 reports; it grows faster than the reports).
METHOD_LIMIT = 100_000


def policy(settings: dict[str, Any]) -> AdaptiveRedundancy:
    """The policy of a campaign's stored settings."""
    return AdaptiveRedundancy(**{k: settings[k] for k in SETTINGS if k in settings})


def check(mech: Mechanism, settings: dict[str, Any], n_labels: int) -> dict[str, Any]:
    """The settings to store (every one named, defaults filled in), or a ValidationError: the
    mechanism must perturb each label through a known channel (randomized response), and the
    target must be above what no answer at all gives."""
    if not mech.flips_labels:
        raise ValidationError(
            f"Adaptive redundancy reads each task's posterior through a randomized-response "
            f"channel (one-layer, two-layer, binary-rr); {mech.name} has none. Drop 'adaptive'."
        )
    unknown = sorted(set(settings) - {*SETTINGS, "model"})
    if unknown:
        raise ValidationError(
            f"adaptive: unknown setting {unknown[0]!r}; it takes {', '.join(SETTINGS)}, model."
        )
    model = settings.get("model") or "method"
    if model not in MODELS:
        raise ValidationError(f"adaptive: model must be 'method' or 'pooled'. Got {model!r}.")
    try:
        made = policy({k: v for k, v in settings.items() if v is not None and k != "model"})
        made.check_labels(n_labels)
    except ValidationError as exc:
        raise ValidationError(f"adaptive: {exc}") from None
    return {**{k: getattr(made, k) for k in SETTINGS}, "model": model}


def next_tasks(conn: sa.Connection, campaign: Any, mech: Mechanism, worker_id: str) -> list[int]:
    """The task positions to hand worker ``worker_id``, most needed first (empty once every
    task is settled or capped, or the campaign's answer budget is spent)."""
    n_tasks = conn.execute(
        sa.select(sa.func.count()).select_from(t_tasks).where(t_tasks.c.campaign_id == campaign.id)
    ).scalar_one()
    k = len(campaign.labels)
    made = policy(campaign.adaptive)
    # The other workers' reports, counted per (task, label) in the database: what the policy
    # reads, and all it reads of any report's value.
    others = conn.execute(
        sa.select(t_reports.c.task_position, t_reports.c.value, sa.func.count())
        .where(
            t_reports.c.campaign_id == campaign.id,
            t_reports.c.worker_id != worker_id,
            t_reports.c.value.is_not(None),
        )
        .group_by(t_reports.c.task_position, t_reports.c.value)
    ).all()
    # Which tasks this worker answered: their positions only, never their values.
    own = np.fromiter(
        conn.execute(
            sa.select(t_reports.c.task_position).where(
                t_reports.c.campaign_id == campaign.id, t_reports.c.worker_id == worker_id
            )
        ).scalars(),
        dtype=np.int64,
    )
    counts = np.zeros((n_tasks, k))
    if others:
        cells = np.array(others, dtype=float)
        counts[cells[:, 0].astype(np.int64), cells[:, 1].astype(np.int64)] = cells[:, 2]
    exclude = np.zeros(n_tasks, dtype=bool)
    exclude[own] = True
    posteriors = None
    fit = campaign.adaptive.get("model", "method") == "method"
    if fit and others and counts.sum() <= METHOD_LIMIT:
        posteriors = _fitted(conn, campaign, mech, worker_id, made, n_tasks)
    n_answers = int(counts.sum()) + own.size
    # Ties are broken at random, so that workers who ask at the same time are spread over
    # equally needed tasks; seeded by the worker and the reports so far, so that asking again
    # gives the same list until a report arrives (nothing to gain by asking twice).
    seed = hashlib.sha256(f"{campaign.id} {worker_id} {n_answers}".encode()).digest()
    picked = made.next_tasks(
        counts,
        mech,
        posteriors=posteriors,
        exclude=exclude,
        n_answers=n_answers,
        rng=int.from_bytes(seed[:8], "big"),
    )
    return [int(p) for p in picked]


def _fitted(
    conn: sa.Connection,
    campaign: Any,
    mech: Mechanism,
    worker_id: str,
    made: AdaptiveRedundancy,
    n_tasks: int,
) -> TaskPosteriors | None:
    """The campaign's method fitted on the other workers' reports, its posteriors over the
    campaign's tasks; None where the method has none or the fit fails (the pooled model then
    ranks the tasks)."""
    result = conn.execute(
        sa.select(t_reports.c.task_position, t_reports.c.worker_id, t_reports.c.value).where(
            t_reports.c.campaign_id == campaign.id,
            t_reports.c.worker_id != worker_id,
            t_reports.c.value.is_not(None),
        )
    )
    # The driver's plain tuples, as the aggregation reads them (aggregate.load).
    rows = result.cursor.fetchall()
    result.close()
    frame = pd.DataFrame(rows, columns=["task", "worker", "value"])
    worker_codes, workers = pd.factorize(frame["worker"])
    answers = Answers(
        task=frame["task"].to_numpy(dtype=np.int32),
        worker=worker_codes.astype(np.int32),
        value=frame["value"].to_numpy(dtype=float).astype(np.int64),
        tasks=pd.RangeIndex(n_tasks),
        workers=pd.Index(workers),
        labels=pd.Index(campaign.labels),
    )
    params: dict[str, Any] = {"mechanism": mech} if takes_mechanism(campaign.method) else {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = make_estimator(campaign.method, **params).fit(answers)
        return made.posteriors_of(fit, pd.RangeIndex(n_tasks))
    except Exception:  # noqa: BLE001 - a fit that fails must not keep workers from their tasks
        return None
