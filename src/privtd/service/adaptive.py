"""Adaptive redundancy in a campaign: its settings, checked once at creation, and the tasks its
task list hands a worker, computed from the stored reports of the other workers.

The policy is :class:`privtd.inference.adaptive.AdaptiveRedundancy`. What a worker is handed is a
function of the other workers' perturbed reports (each a differentially private release) and of
which tasks this worker already answered; never of this worker's own reports, raw or perturbed
(``docs/service.md``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import sqlalchemy as sa

from ..errors import ValidationError
from ..inference.adaptive import AdaptiveRedundancy
from ..mechanisms._base import Mechanism
from ..mechanisms.randomized_response import OneLayerRR, TwoLayerRR
from .schema import reports as t_reports
from .schema import tasks as t_tasks

#: The settings a campaign may give, with the policy's defaults.
SETTINGS = ("target", "max_per_task", "min_per_task", "batch", "max_answers")


def policy(settings: dict[str, Any]) -> AdaptiveRedundancy:
    """The policy of a campaign's stored settings."""
    return AdaptiveRedundancy(**{k: settings[k] for k in SETTINGS if k in settings})


def check(mech: Mechanism, settings: dict[str, Any], n_labels: int) -> dict[str, Any]:
    """The settings to store (every one named, defaults filled in), or a ValidationError: the
    mechanism must perturb each label through a known channel (randomized response), and the
    target must be above what no answer at all gives."""
    if not isinstance(mech, OneLayerRR | TwoLayerRR):
        raise ValidationError(
            f"Adaptive redundancy reads each task's posterior through a randomized-response "
            f"channel (one-layer, two-layer, binary-rr); {mech.name} has none. Drop 'adaptive'."
        )
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValidationError(
            f"adaptive: unknown setting {unknown[0]!r}; it takes {', '.join(SETTINGS)}."
        )
    try:
        made = policy({k: v for k, v in settings.items() if v is not None})
        made.check_labels(n_labels)
    except ValidationError as exc:
        raise ValidationError(f"adaptive: {exc}") from None
    return {k: getattr(made, k) for k in SETTINGS}


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
    n_answers = int(counts.sum()) + own.size
    # Ties are broken at random, so that workers who ask at the same time are spread over
    # equally needed tasks; seeded by the worker and the reports so far, so that asking again
    # gives the same list until a report arrives (nothing to gain by asking twice).
    seed = hashlib.sha256(f"{campaign.id} {worker_id} {n_answers}".encode()).digest()
    picked = made.next_tasks(
        counts, mech, exclude=exclude, n_answers=n_answers, rng=int.from_bytes(seed[:8], "big")
    )
    return [int(p) for p in picked]
